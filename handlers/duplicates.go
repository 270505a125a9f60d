package handlers

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// duplicateKey finds the first key that appears twice in one object of
// the JSON document data, at any depth. It returns the key's path as first
// written ("user_id", or "items[2].name" in a nested body) and the key as
// written the second time. data must be valid JSON.
//
// encoding/json keeps the last of two equal keys, while a proxy or a
// firewall in front of the service may act on the first; refusing the body
// leaves no room for the two to disagree. Keys count as equal when
// encoding/json would fill the same struct field with them: it matches
// names without regard to case (Unicode simple folding), so "user_id" and
// "USER_ID" are the same key. In an object decoded into a map, where case
// matters, this refuses keys that differ only in case as well, which no
// client of this API has a reason to send.
func duplicateKey(data []byte) (path, again string, found bool) {
	// frame is one open object or array.
	type frame struct {
		object bool
		seen   map[string]string // folded key to the key as first written (objects)
		key    string            // the current key (objects)
		index  int               // the current element (arrays)
		inKey  bool              // an object's next string is a key
	}
	var stack []*frame
	pathOf := func(last string) string {
		var b []byte
		for _, f := range stack[:len(stack)-1] {
			if f.object {
				if len(b) > 0 {
					b = append(b, '.')
				}
				b = append(b, f.key...)
			} else {
				b = append(b, '[')
				b = strconv.AppendInt(b, int64(f.index), 10)
				b = append(b, ']')
			}
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		return string(append(b, last...))
	}
	// valueDone moves the enclosing object or array past a finished value.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.object {
			f.inKey = true
		} else {
			f.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false // the end, or invalid JSON, which the decoder has refused already
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{object: true, seen: map[string]string{}, inKey: true})
			case '[':
				stack = append(stack, &frame{})
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if f := stack; len(f) > 0 && f[len(f)-1].object && f[len(f)-1].inKey {
				top := f[len(f)-1]
				folded := foldKey(t)
				if first, dup := top.seen[folded]; dup {
					return pathOf(first), t, true
				}
				top.seen[folded] = t
				top.key, top.inKey = t, false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// foldKey maps every key to one representative of the keys encoding/json
// treats as the same field name: ASCII letters upper-cased, other runes
// replaced by the smallest rune of their Unicode simple-fold set, the
// folding encoding/json uses to match names.
func foldKey(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b = append(b, byte(r))
		default:
			for {
				r2 := unicode.SimpleFold(r)
				if r2 <= r {
					r = r2
					break
				}
				r = r2
			}
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}
