package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// gate tasks result reads GET /v1/tasks/{id}/result as it arrives: a payload
// over 1 MiB comes streamed as content_base64 with checksum_valid after it
// (docs/http.md), so the answer is never held whole. The payload is decoded
// into the output while its sha256 is computed here.

// resultAnswer is the answer of GET /v1/tasks/{id}/result without its
// payload.
type resultAnswer struct {
	TaskID         string            `json:"task_id"`
	Channel        string            `json:"channel"`
	ResultPointer  string            `json:"result_pointer"`
	ResultChecksum string            `json:"result_checksum"`
	ChecksumValid  *bool             `json:"checksum_valid"`
	Summary        string            `json:"summary"`
	Artifacts      []client.Artifact `json:"artifacts"`

	// What came: the payload's decoded length, whether it came as JSON
	// content (re-encoded by the gate) or as base64 (the bytes as stored),
	// and their sha256 as computed here.
	bytes   int64
	gotJSON bool
	gotB64  bool
	sum     []byte
}

// printResult is gate tasks result.
func printResult(rc *remoteCtx, id, outFile string) error {
	if outFile != "" && rc.json {
		return exitErr{exitUsage, "give --out or --json, not both"}
	}
	body, err := openResult(rc, id)
	if err != nil {
		return err
	}
	defer body.Close()

	var out io.Writer = rc.raw // the payload, as it is
	var tmp *os.File
	if outFile != "" {
		tmp, err = os.CreateTemp(filepath.Dir(outFile), "."+filepath.Base(outFile)+".part-*")
		if err != nil {
			return exitErr{exitError, fmt.Sprintf("--out: %v", err)}
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		out = tmp
	}
	in := io.Reader(body)
	if rc.json {
		in = io.TeeReader(body, rc.raw) // the answer as it came; the payload is checked, not written twice
		out = io.Discard
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	a, err := readResultAnswer(in, bw)
	if err != nil {
		return fmt.Errorf("reading the result of %s: %w", id, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the result: %w", err)
	}
	verdict, ok := a.checksumVerdict()
	if !ok {
		return exitErr{exitError, fmt.Sprintf("%s: %s", id, verdict)}
	}
	if rc.json {
		return nil
	}
	if a.bytes == 0 && !a.gotJSON && !a.gotB64 {
		// No payload: say where the result is.
		fmt.Fprintf(rc.out, "%s has no payload at the gate", a.TaskID)
		if a.ResultPointer != "" {
			fmt.Fprintf(rc.out, "; result: %s", oneLine(a.ResultPointer))
		}
		fmt.Fprintln(rc.out)
		for _, ar := range a.Artifacts {
			fmt.Fprintf(rc.out, "artifact: %s %s\n", oneLine(ar.Type), oneLine(strings.TrimSpace(ar.URL+" "+string(ar.Ref))))
		}
		if a.Summary != "" {
			fmt.Fprintf(rc.out, "summary: %s\n", oneLine(a.Summary))
		}
		return nil
	}
	if a.gotJSON && tmp == nil {
		fmt.Fprintln(rc.out) // the JSON content ends its line
	}
	where := "stdout"
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := tmp.Close(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := os.Rename(tmp.Name(), outFile); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		tmp = nil
		where = outFile
	}
	fmt.Fprintf(rc.errw, "%s: %d bytes from channel %s to %s; %s\n", a.TaskID, a.bytes, a.Channel, where, verdict)
	return nil
}

// checksumVerdict says how the payload's checksum was checked, and false
// when it does not match.
func (a *resultAnswer) checksumVerdict() (string, bool) {
	if a.ChecksumValid != nil && !*a.ChecksumValid {
		return fmt.Sprintf("the payload does not match its checksum %s (the gate's check): it was altered where it is stored", a.ResultChecksum), false
	}
	algo, want, _ := strings.Cut(a.ResultChecksum, ":")
	if a.gotB64 && algo == "sha256" {
		// The bytes as stored: hash them here too.
		got := hex.EncodeToString(a.sum)
		if !strings.EqualFold(got, want) {
			return fmt.Sprintf("the payload received hashes to sha256:%s, not its checksum %s", got, a.ResultChecksum), false
		}
		return "checksum " + a.ResultChecksum + " verified here and by the gate", true
	}
	if a.ChecksumValid != nil {
		// JSON content comes re-encoded (compact), so only the gate, which
		// read the stored bytes, can compare them with the checksum.
		return "checksum " + a.ResultChecksum + " verified by the gate", true
	}
	if a.bytes == 0 && !a.gotJSON && !a.gotB64 {
		return "no payload", true
	}
	return "no checksum recorded", true
}

// openResult sends GET /v1/tasks/{id}/result and returns the body of a 200
// answer. The command's --timeout bounds the wait for the answer to start,
// not the time to read it (a large payload streams for longer; the gate cuts
// a stream that stalls). A 503 busy is asked again after its Retry-After
// while the timeout allows; other refusals are *client.APIError, shown as
// the other commands show them.
func openResult(rc *remoteCtx, id string) (io.ReadCloser, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = rc.timeout
	hc := &http.Client{Transport: tr}
	deadline := time.Now().Add(rc.timeout)
	for {
		req, err := http.NewRequestWithContext(rc.ctx, "GET", strings.TrimRight(rc.url, "/")+"/v1/tasks/"+url.PathEscape(id)+"/result", nil)
		if err != nil {
			return nil, err
		}
		if rc.key != "" {
			req.Header.Set("Authorization", "Bearer "+rc.key)
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "gate-cli/"+buildVersion())
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		if res.StatusCode == http.StatusOK {
			return res.Body, nil
		}
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		ae := &client.APIError{Status: res.StatusCode, Code: http.StatusText(res.StatusCode)}
		var eb struct {
			Error  string `json:"error"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
			ae.Code, ae.Detail = eb.Error, eb.Detail
		} else {
			ae.Detail = clip(strings.TrimSpace(string(raw)), 200)
		}
		wait, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		pause := time.Duration(max(wait, 1)) * time.Second
		if res.StatusCode != http.StatusServiceUnavailable || ae.Code != "busy" || time.Now().Add(pause).After(deadline) {
			return nil, ae
		}
		fmt.Fprintf(rc.errw, "%s: the gate is busy sending other results; asking again in %s\n", id, pause)
		select {
		case <-rc.ctx.Done():
			return nil, rc.ctx.Err()
		case <-time.After(pause):
		}
	}
}

// readResultAnswer reads the result answer from r: its fields, and its
// payload decoded into w — content (JSON) as it came, content_base64
// decoded as it streams, hashed on the way.
func readResultAnswer(r io.Reader, w io.Writer) (*resultAnswer, error) {
	a := &resultAnswer{}
	fields := map[string]json.RawMessage{}
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("the answer is not a JSON object (%v)", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if key != "content_base64" {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			fields[key] = v
			continue
		}
		// The payload, streamed: read the string's characters straight
		// from the input, decode them and hash them on the way; then go on
		// with the fields after it.
		br := bufio.NewReader(io.MultiReader(dec.Buffered(), r))
		if err := expect(br, ':'); err != nil {
			return nil, err
		}
		if err := expect(br, '"'); err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, h), base64.NewDecoder(base64.StdEncoding, &jsonStringReader{br: br}))
		if err != nil {
			return nil, fmt.Errorf("content_base64: %w", err)
		}
		a.bytes, a.gotB64, a.sum = n, true, h.Sum(nil)
		// The rest is `, "key": value … }` or `}`: read it as an object.
		if err := skipSpace(br); err != nil {
			return nil, fmt.Errorf("the answer ends after its payload: %w", err)
		}
		c, _ := br.ReadByte()
		switch c {
		case '}':
			return a, a.fill(fields)
		case ',':
			rest := map[string]json.RawMessage{}
			if err := json.NewDecoder(io.MultiReader(strings.NewReader("{"), br)).Decode(&rest); err != nil {
				return nil, fmt.Errorf("the fields after the payload: %w", err)
			}
			for k, v := range rest {
				fields[k] = v
			}
			return a, a.fill(fields)
		default:
			return nil, fmt.Errorf("unexpected %q after the payload", c)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if c, ok := fields["content"]; ok && string(c) != "null" {
		n, err := w.Write(c)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(c)
		a.bytes, a.gotJSON, a.sum = int64(n), true, h[:]
	}
	return a, a.fill(fields)
}

// fill decodes the fields read into a.
func (a *resultAnswer) fill(fields map[string]json.RawMessage) error {
	delete(fields, "content")
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, a)
}

// expect skips white space and reads the byte c.
func expect(br *bufio.Reader, c byte) error {
	if err := skipSpace(br); err != nil {
		return err
	}
	got, err := br.ReadByte()
	if err != nil {
		return err
	}
	if got != c {
		return fmt.Errorf("expected %q, found %q", c, got)
	}
	return nil
}

// skipSpace skips JSON white space.
func skipSpace(br *bufio.Reader) error {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return br.UnreadByte()
		}
	}
}

// jsonStringReader reads the characters of a JSON string holding base64
// (no escapes) up to its closing quote, which it consumes.
type jsonStringReader struct {
	br   *bufio.Reader
	done bool
}

func (s *jsonStringReader) Read(p []byte) (int, error) {
	if s.done {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) {
		if n > 0 && s.br.Buffered() == 0 {
			break // hand over what we have rather than block
		}
		c, err := s.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the answer was cut short
			}
			return n, err
		}
		switch c {
		case '"':
			s.done = true
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		case '\\':
			// Go's encoder never escapes base64's alphabet except '/'
			// (which it does not either); accept \/ from other encoders.
			e, err := s.br.ReadByte()
			if err != nil || e != '/' {
				return n, fmt.Errorf("unexpected escape in content_base64")
			}
			c = '/'
		}
		p[n] = c
		n++
	}
	return n, nil
}
