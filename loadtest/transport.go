package loadtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// newTransport returns the one transport of a run, shared by the attack and
// the API calls. Proxy is nil on purpose: the load goes to the configured
// targets and nowhere else, whatever HTTP_PROXY says.
func newTransport(cfg Config) *http.Transport {
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: cfg.MaxWorkers,
		MaxConnsPerHost:     cfg.MaxWorkers,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: cfg.Timeout,
	}
}

// newClient returns a client that never follows redirects (a redirect could
// send load to a host nobody configured) and gives up after timeout.
func newClient(rt http.RoundTripper, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: rt,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// abortable makes in-flight requests end when ctx ends. Vegeta builds its
// requests without a context and Attacker.Stop only stops sending new ones,
// so without this an interrupted run would wait for every slow request.
type abortable struct {
	ctx  context.Context
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper. The request context is derived from
// the caller's (which carries the client timeout) and also ends with a.ctx;
// it is released when the body is closed, not when RoundTrip returns, or the
// body could not be read.
func (a abortable) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(a.ctx, cancel)
	release := func() { stop(); cancel() }

	resp, err := a.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		release()
		// Marked so that the history, which sees only Vegeta's copy of
		// the message, knows the request was never sent.
		return nil, markNotSent(err)
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// releasingBody runs release once, when the body is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
	once    sync.Once
}

// Close implements io.Closer.
func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
