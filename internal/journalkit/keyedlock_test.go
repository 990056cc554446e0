package journalkit

import (
	"context"
	"testing"
)

// TryLock takes a free lock and refuses a held one without waiting (with
// no deadline, a TryLock that waited would never return); a name's entry
// goes once no one holds or awaits it.
func TestTryLock(t *testing.T) {
	var s Set
	unlock := s.TryLock("a")
	if unlock == nil {
		t.Fatal("TryLock of a free name refused")
	}
	if s.TryLock("a") != nil {
		t.Fatal("TryLock of a held name took it")
	}
	other := s.TryLock("b")
	if other == nil {
		t.Fatal("TryLock of another name refused")
	}
	other()
	unlock()
	again, err := s.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	again()
	if n := len(s.m); n != 0 {
		t.Fatalf("%d entries left after every lock was released, want 0", n)
	}
}
