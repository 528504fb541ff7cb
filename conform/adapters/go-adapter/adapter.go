// Package adapter is the txnsim-conform/v1 protocol shared by the Go adapters (franz-go, sarama,
// kafka-go): the request, the output lines and their framing; each adapter's main.go holds only its
// client's read loop (docs/conform.md has the contract).
package adapter

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	format = "txnsim-conform/v1"
	// One poll waits at most this long, so that the stop conditions are checked often even when the client
	// hands over nothing (a fetch of markers or aborted data only moves the client's internal cursor, or delivers nothing).
	PollSlice = 200 * time.Millisecond
	// Close is bounded: the process exits after this even if the client has not finished closing.
	CloseBound = 2 * time.Second
)

// Request is the request's fields; pointers so that a missing one is told from a zero.
type Request struct {
	Format      *string `json:"format"`
	Bootstrap   *string `json:"bootstrap"`
	Topic       *string `json:"topic"`
	Partition   *int32  `json:"partition"`
	StartOffset *int64  `json:"start_offset"`
	Isolation   *string `json:"isolation"`
	StopOffset  *int64  `json:"stop_offset"`
	MaxRecords  *int64  `json:"max_records"`
	TimeoutMs   *int64  `json:"timeout_ms"`
}

// RecordLine is one delivered record; its fields keep the contract's key order (offset, value, key).
type RecordLine struct {
	Offset int64   `json:"offset"`
	Value  *string `json:"value"`
	Key    *string `json:"key,omitempty"`
}

var out = bufio.NewWriter(os.Stdout)

// Emit prints one output line.
func Emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the adapter's own types are marshalled; this cannot happen short of a bug here.
		b = []byte(`{"error":"marshalling an output line failed"}`)
	}
	out.Write(b)
	out.WriteByte('\n')
	// Flushed line by line, so that a runner that kills a slow adapter still sees what was delivered.
	out.Flush()
}

// Fail prints the error line and exits 1.
func Fail(format string, args ...any) {
	// One line: newlines in an error's text would break the contract's line framing.
	Emit(map[string]string{"error": strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")})
	os.Exit(1)
}

// The version of the module this binary was built with: go.mod's pin, as the build recorded it.
func moduleVersion(modulePath string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == modulePath {
				if dep.Replace != nil {
					return dep.Replace.Version
				}
				return dep.Version
			}
		}
	}
	return "unknown"
}

func parseRequest(line []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return req, err
	}
	if req.Format == nil || *req.Format != format {
		return req, fmt.Errorf("format is missing or not %s", format)
	}
	for name, p := range map[string]*string{"bootstrap": req.Bootstrap, "topic": req.Topic, "isolation": req.Isolation} {
		if p == nil {
			return req, fmt.Errorf("%s is missing", name)
		}
	}
	if req.Partition == nil || *req.Partition < 0 {
		return req, errors.New("partition is missing or negative")
	}
	for name, p := range map[string]*int64{"start_offset": req.StartOffset, "stop_offset": req.StopOffset,
		"max_records": req.MaxRecords, "timeout_ms": req.TimeoutMs} {
		if p == nil || *p < 0 {
			return req, fmt.Errorf("%s is missing or negative", name)
		}
	}
	return req, nil
}

// Text is a key or value as the contract's UTF-8 string; bytes that are not UTF-8 are an error (with the offset)
// rather than a silently altered value (encoding/json would replace them with U+FFFD).
func Text(raw []byte, what string, offset int64) *string {
	if !utf8.Valid(raw) {
		Fail("the %s at offset %d is not UTF-8", what, offset)
	}
	s := string(raw)
	return &s
}

// Start prints the client line (first, whatever follows) for the client module at modulePath, reads the
// one request line on stdin and returns it, or prints the error line and exits 1.
func Start(clientName, modulePath string) Request {
	Emit(map[string]string{"client": clientName, "version": moduleVersion(modulePath)})
	line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		Fail("bad request: reading stdin: %v", err)
	}
	req, err := parseRequest(line)
	if err != nil {
		Fail("bad request: %v", err)
	}
	return req
}
