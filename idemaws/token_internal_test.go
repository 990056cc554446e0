package idemaws

import (
	"fmt"
	"testing"
)

type inputWithMap struct {
	Name        *string
	ClientToken *string
	Tags        map[string]string
}

// TestTheFingerprintIgnoresMapOrder proves A1.6: the same input has the
// same fingerprint however its maps were built, and the token aside.
func TestTheFingerprintIgnoresMapOrder(t *testing.T) {
	name, token := "n", "t"
	forward, backward := map[string]string{}, map[string]string{}
	for i := range 200 {
		forward[fmt.Sprint(i)] = "v"
		backward[fmt.Sprint(199-i)] = "v"
	}
	want, err := fingerprint("svc.Op", &inputWithMap{Name: &name, Tags: forward}, tokenPath{1})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		got, err := fingerprint("svc.Op", &inputWithMap{Name: &name, ClientToken: &token, Tags: backward}, tokenPath{1})
		if err != nil || got != want {
			t.Fatalf("fingerprint = %s, %v; want %s", got, err, want)
		}
	}
	other := "m"
	for _, in := range []struct {
		service, op string
		input       *inputWithMap
	}{
		{"svc", "Op", &inputWithMap{Name: &other, Tags: forward}},
		{"svc", "Op", &inputWithMap{Name: &name, Tags: map[string]string{"1": "v"}}},
		{"svc", "Op2", &inputWithMap{Name: &name, Tags: forward}},
		{"svc2", "Op", &inputWithMap{Name: &name, Tags: forward}},
	} {
		if got, _ := fingerprint(in.service+"."+in.op, in.input, tokenPath{1}); got == want {
			t.Errorf("%s.%s with %v has the same fingerprint", in.service, in.op, in.input)
		}
	}
}
