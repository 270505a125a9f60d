package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/procutil"
)

// ReplicaCommand returns a command that runs one replica of the service
// configured by its environment (app.Config.Environ, added to the
// command's own Env): the program's own "serve", which main passes to
// Command. With one, the demo runs the replicas of the local lock mode and
// of no lock as processes of their own; without (nil), they run in this
// process like the others.
//
// The local lock is one mutex per process, and its oversell needs two
// processes' purchases to overlap. Replicas in one process share one Go
// scheduler, and under a burst they tend to take turns: in about one sale
// in twenty, each replica's purchases fell between the other's and nothing
// was oversold. As processes, as they are deployed, they overlap from the
// first purchases on. The lost updates of no lock need the same overlap.
type ReplicaCommand func() (*exec.Cmd, error)

// Bounds of a replica process's start and stop.
const (
	processReady = 15 * time.Second // from start to /readyz answering 200
	processGrace = 2 * time.Second  // past its shutdown timeout, before SIGKILL
	portAttempts = 3                // a free port can be taken before the replica listens on it
)

// replicaProcess is one replica running as a child process.
type replicaProcess struct {
	proc   *procutil.Process
	url    string
	out    *procutil.TailBuffer // the end of its output, for errors
	killed bool                 // by kill: its exit is no error
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (r *replicaProcess) kill() error {
	r.killed = true
	if err := r.proc.Cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill replica process %d: %w", r.proc.Pid(), err)
	}
	<-r.proc.Done()
	return nil
}

// startProcess starts a replica of cfg as a child process on a free
// 127.0.0.1 port and waits until it is ready. Its warnings and errors go
// to logger, one record per line of its log.
func startProcess(ctx context.Context, command ReplicaCommand, cfg app.Config, logger *slog.Logger) (*replicaProcess, error) {
	var err error
	for range portAttempts {
		var r *replicaProcess
		r, err = tryStartProcess(ctx, command, cfg, logger)
		if err == nil {
			return r, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func tryStartProcess(ctx context.Context, command ReplicaCommand, cfg app.Config, logger *slog.Logger) (*replicaProcess, error) {
	port, err := procutil.FreePort()
	if err != nil {
		return nil, err
	}
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	cfg.LogLevel = slog.LevelWarn
	cmd, err := command()
	if err != nil {
		return nil, err
	}
	// Its environment is its configuration (after what the command
	// itself sets), and nothing from the shell: a LOCK or DATABASE there
	// must not change the sale.
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "TMPDIR="+os.TempDir())
	cmd.Env = append(cmd.Env, cfg.Environ()...)
	r := &replicaProcess{url: "http://" + cfg.Addr, out: &procutil.TailBuffer{Max: 4 << 10}}
	logW := &lineLogger{logger: logger}
	cmd.Stdout = io.MultiWriter(r.out, logW)
	cmd.Stderr = cmd.Stdout
	if r.proc, err = procutil.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	if err := r.waitReady(ctx); err != nil {
		_ = r.stop(0) // the error says why; the stop's own would repeat the output
		return nil, err
	}
	return r, nil
}

// waitReady polls /readyz until it answers 200, the process exits, ctx
// ends or processReady passes.
func (r *replicaProcess) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, processReady)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-r.proc.Done():
			return fmt.Errorf("replica process %d exited before it was ready: %v; its output ends:\n%s", r.proc.Pid(), r.proc.Wait(), r.out)
		case <-ctx.Done():
			return fmt.Errorf("replica process %d on %s: not ready: %w", r.proc.Pid(), r.url, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the process by its PID: SIGTERM (on Windows a CTRL_BREAK,
// procutil.Terminate), which shuts it down gracefully within its shutdown
// timeout, then a kill past that and processGrace. A process that had already exited, or that exits with an
// error, is reported with the end of its output.
func (r *replicaProcess) stop(shutdown time.Duration) error {
	if r.killed {
		return nil
	}
	select {
	case <-r.proc.Done():
		return fmt.Errorf("replica process %d exited before it was stopped: %v; its output ends:\n%s", r.proc.Pid(), r.proc.Wait(), r.out)
	default:
	}
	_ = procutil.Terminate(r.proc.Cmd.Process)
	t := time.NewTimer(shutdown + processGrace)
	defer t.Stop()
	select {
	case <-r.proc.Done():
		if err := r.proc.Wait(); err != nil {
			return fmt.Errorf("replica process %d: %w; its output ends:\n%s", r.proc.Pid(), err, r.out)
		}
		return nil
	case <-t.C:
	}
	_ = r.proc.Cmd.Process.Kill()
	<-r.proc.Done()
	return fmt.Errorf("replica process %d did not stop within %v of SIGTERM; killed", r.proc.Pid(), shutdown+processGrace)
}

// lineLogger passes each line a replica process writes to logger: as a
// warning when it is a level=WARN record, otherwise as an error. The
// process logs at warn level, so anything else is an error record or not
// a log record at all (a panic).
type lineLogger struct {
	logger *slog.Logger
	rest   []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.rest = append(l.rest, p...)
	for {
		i := bytes.IndexByte(l.rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.rest[:i])
		l.rest = l.rest[i+1:]
		switch {
		case line == "":
		case strings.Contains(line, " level=WARN "):
			l.logger.Warn("replica process", "log", line)
		default:
			l.logger.Error("replica process", "log", line)
		}
	}
}
