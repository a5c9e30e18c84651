package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// TestReceiptsVerifyAsServed fetches a receipt whose body holds <, > and &
// and checks that the bytes the API answers are the ones its hash covers: an
// HTML-escaping encoder wrote them as \u003c… and broke every verifier
// working from the HTTP answers.
func TestReceiptsVerifyAsServed(t *testing.T) {
	b := setup(t)
	code, m := b.do(t, "POST", "/v1/receipts", b.agent, `{"receipt_type":"task.progress","to":"agent.a","body":{"note":"<b> & c"}}`)
	if code != 201 {
		t.Fatalf("append: %d %v", code, m)
	}
	id, _ := m["receipt_id"].(string)
	req, _ := http.NewRequest("GET", b.ts.URL+"/v1/receipts/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+b.agent)
	res, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(raw), `"<b> & c"`) {
		t.Fatalf("the body is not served as stored: %s", raw)
	}
	var r host.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if r.Hash == "" {
		t.Fatalf("no hash in %s", raw)
	}
	if got := host.HashReceipt(host.ChainV2, &r, r.PrevHash); got != r.Hash {
		t.Fatalf("hash over the served receipt %s, recorded %s", got, r.Hash)
	}
}
