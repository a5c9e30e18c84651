package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The contract check: tests that call contract(t) have every request they
// send with call() and its answer validated against the OpenAPI document the
// gate serves at /openapi.json (kin-openapi). A request the document allows
// must get an answer the document describes; a request it refuses must get a
// 4xx, in the error shape.

var contractTests sync.Map // *testing.T → true

// contractAllEnv set to "all" checks every test's calls, not only those that
// call contract (ASYNCGATE_E2E_CONTRACT=all go test ./cmd/gate).
const contractAllEnv = "ASYNCGATE_E2E_CONTRACT"

// contract turns the contract check on for t's calls.
func contract(t *testing.T) {
	contractTests.Store(t, true)
	t.Cleanup(func() { contractTests.Delete(t) })
}

type contractDoc struct {
	doc    *openapi3.T
	router routers.Router
}

var contractDocs sync.Map // gate URL → *contractDoc

// contractFor loads (once per gate) the document the gate serves.
func contractFor(t *testing.T, base string) *contractDoc {
	t.Helper()
	if d, ok := contractDocs.Load(base); ok {
		return d.(*contractDoc)
	}
	r, err := tryCall("GET", base+"/openapi.json", "", nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("GET /openapi.json: %v %d %s", err, r.Status, r.Body)
	}
	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	if err != nil {
		t.Fatalf("loading /openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("/openapi.json is not valid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	d := &contractDoc{doc: doc, router: router}
	contractDocs.Store(base, d)
	return d
}

// checkContract validates one exchange when t asked for the check.
func checkContract(t *testing.T, method, url, key string, body []byte, r resp) {
	t.Helper()
	if _, ok := contractTests.Load(t); !ok && os.Getenv(contractAllEnv) != "all" {
		return
	}
	checkContractAlways(t, method, url, key, body, r)
}

// checkContractAlways validates one exchange.
func checkContractAlways(t *testing.T, method, url, key string, body []byte, r resp) {
	t.Helper()
	i := strings.Index(url[len("http://"):], "/")
	if i < 0 {
		return
	}
	base, path := url[:len("http://")+i], url[len("http://")+i:]
	if p, _, _ := strings.Cut(path, "?"); openapi.IsExcluded(p) {
		return
	}
	d := contractFor(t, base)
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := d.router.FindRoute(req)
	if err != nil {
		// Not in the document: the gate must say so (404, or 405 for a
		// known path), in the error shape.
		if r.Status != 404 && r.Status != 405 {
			t.Errorf("contract: %s %s is not in the OpenAPI document (%v) but answered %d", method, path, err, r.Status)
		}
		checkErrorShape(t, d, method, path, r)
		return
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && (r.Status < 400 || r.Status >= 500) {
		t.Errorf("contract: the document refuses %s %s %s (%v) but the gate answered %d: %s", method, path, body, reqErr, r.Status, r.Body)
	}
	// Validate the answer as an answer to that route.
	req2, _ := http.NewRequest(method, url, bytes.NewReader(body))
	in.Request = req2
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header,
		Body: io.NopCloser(bytes.NewReader(r.Body)), Options: opts}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("contract: the answer to %s %s does not match the document: %v\nstatus %d body %s", method, path, err, r.Status, r.Body)
	}
}

// checkErrorShape validates an error answer against the Error schema.
func checkErrorShape(t *testing.T, d *contractDoc, method, path string, r resp) {
	t.Helper()
	s := d.doc.Components.Schemas["Error"].Value
	var v any
	if err := jsonUnmarshal(r.Body, &v); err != nil {
		t.Errorf("contract: %s %s answered %d, not JSON: %q", method, path, r.Status, r.Body)
		return
	}
	if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("contract: %s %s answered %d, not the error shape: %v", method, path, r.Status, err)
	}
}

// contractProxy starts a reverse proxy to g that checks every exchange
// passing through it against the document, like call does, and returns its
// URL: point a client that is not this process (the CLI) at it.
func contractProxy(t *testing.T, g *gateProc) string {
	t.Helper()
	target, err := neturl.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	// A request the client gave up on (gate tasks wait --for) never reached
	// an answer: nothing to check.
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil {
			t.Errorf("contract proxy: %s %s: %v", r.Method, r.URL, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) == 0 {
			body = nil
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if r.Context().Err() != nil {
			return // the client went away
		}
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		checkContractAlways(t, r.Method, g.URL+r.URL.RequestURI(), key, body, resp{Status: rec.Code, Body: rec.Body.Bytes(), Header: rec.Header()})
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
