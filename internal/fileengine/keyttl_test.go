package fileengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// --- J10, the key lifetime of each operation ------------------------------

// intentPayloadV1 encodes in as the intents of the format's first release
// were: version 1, ending at Created, without a key lifetime.
func intentPayloadV1(in Intent) []byte {
	buf := []byte{intentVersion1}
	buf = appendString(buf, in.ID)
	buf = appendString(buf, in.Key)
	buf = append(buf, in.Fingerprint[:]...)
	buf = appendString(buf, in.Method)
	buf = appendString(buf, in.URL)
	return binary.AppendVarint(buf, in.Created.UnixNano())
}

// TestIntentPayloadCarriesTheKeyLifetime pins the version 2 intent: the
// version byte 2, then the fields of version 1, then the key lifetime.
// Clause: J10.1.
func TestIntentPayloadCarriesTheKeyLifetime(t *testing.T) {
	in := testIntent(3)
	in.KeyTTL = 90 * time.Minute
	got := intentPayload(in)
	v1 := intentPayloadV1(in)
	want := append([]byte{intentVersion}, v1[1:]...)
	want = binary.AppendUvarint(want, uint64(90*time.Minute))
	if !bytes.Equal(got, want) {
		t.Fatalf("intent payload\n got % x\nwant % x", got, want)
	}
	var r Record
	if reason := decodeIntent(got, &r); reason != "" || r.KeyTTL != int64(90*time.Minute) {
		t.Fatalf("decodeIntent = %q, KeyTTL %v; want 1h30m", reason, time.Duration(r.KeyTTL))
	}
	// The longest lifetime a Duration holds is taken; one more
	// nanosecond, which a Duration cannot hold, is refused.
	for ttl, ok := range map[uint64]bool{math.MaxInt64: true, math.MaxInt64 + 1: false, 1: true} {
		p := binary.AppendUvarint(append([]byte{intentVersion}, v1[1:]...), ttl)
		reason := decodeIntent(p, &r)
		if (reason == "") != ok || (ok && uint64(r.KeyTTL) != ttl) || (!ok && !strings.Contains(reason, "key lifetime")) {
			t.Errorf("decodeIntent of a lifetime of %d ns: %q, KeyTTL %d; want accepted: %v", ttl, reason, r.KeyTTL, ok)
		}
	}
}

// TestJournalKeepsEachOperationsKeyLifetime begins operations with
// different key lifetimes: each reads back with its own, after reopening
// and after compaction, and the journal judges each pending one expired by
// its own (Stats.Pending, Meta.Expired).
// Clauses: J10.2, J10.3.
func TestJournalKeepsEachOperationsKeyLifetime(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	short, long := testIntent(2*3600), testIntent(2*3600+1) // both about 2h old
	short.KeyTTL, long.KeyTTL = time.Hour, 3*time.Hour
	mustBegin(t, j, short)
	mustBegin(t, j, long)
	check := func(what string, j *Journal) {
		t.Helper()
		sameRecords(t, what, records(j), []Record{recordOf(long), recordOf(short)})
		if st := j.Stats(); st.Pending != 1 {
			t.Fatalf("%s: Stats.Pending = %d, want 1 (only the 3h key is unexpired)", what, st.Pending)
		}
		for _, tc := range []struct {
			in      Intent
			expired bool
		}{{short, true}, {long, false}} {
			m, ok := j.LookupMeta(tc.in.ID)
			if !ok || time.Duration(m.KeyTTL) != tc.in.KeyTTL || m.Expired(testNow) != tc.expired {
				t.Fatalf("%s: Meta of %s = %+v, expired %v; want KeyTTL %v, expired %v", what, tc.in.ID, m, m.Expired(testNow), tc.in.KeyTTL, tc.expired)
			}
		}
	}
	check("written", j)
	mustClose(t, j)
	j = openTestJournal(t, path, quietOptions())
	check("reopened", j)
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	check("compacted", j)
	mustClose(t, j)
}

// TestCompactionKeepsAnOutcomeForItsOwnKeyLifetime completes two
// operations 2h ago, one whose key lives 1h and one whose key lives 3h:
// compaction summarizes the first and keeps the second whole.
// Clause: J10.3.
func TestCompactionKeepsAnOutcomeForItsOwnKeyLifetime(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	short, long := testIntent(3*3600), testIntent(3*3600+1)
	short.KeyTTL, long.KeyTTL = time.Hour, 3*time.Hour
	var done []Completion
	for _, in := range []Intent{short, long} {
		mustBegin(t, j, in)
		c := testOutcome(in, 200, "ok")
		c.Completed = testNow.Add(-2 * time.Hour)
		mustComplete(t, j, c)
		done = append(done, c)
	}
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	summary := done[0]
	summary.Header, summary.Body, summary.Flags = nil, nil, FlagBodyTruncated|FlagHeaderTruncated|FlagSummarized
	sameRecords(t, "after Compact", records(j), []Record{recordOf(long, done[1]), recordOf(short, summary)})
	mustClose(t, j)
}

// TestVersion1IntentsReadAsTheDefaultKeyLifetime opens a journal written
// with the first release's intents (no key lifetime): each reads as
// DefaultKeyTTL, is judged expired by it, and compaction rewrites it as a
// version 2 intent that keeps it.
// Clause: J10.4.
func TestVersion1IntentsReadAsTheDefaultKeyLifetime(t *testing.T) {
	path := journalPath(t)
	fresh, old := testIntent(23*3600), testIntent(25*3600)
	writeFile(t, path, fileOf(
		frameRecord(t, recIntent, intentPayloadV1(fresh)),
		frameRecord(t, recIntent, intentPayloadV1(old)),
	))
	j := openTestJournal(t, path, quietOptions())
	fresh.KeyTTL, old.KeyTTL = DefaultKeyTTL, DefaultKeyTTL
	sameRecords(t, "version 1", records(j), []Record{recordOf(old), recordOf(fresh)})
	if st := j.Stats(); st.Pending != 1 {
		t.Fatalf("Stats.Pending = %d, want 1 (the 25h old key is expired at 24h)", st.Pending)
	}
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	mustClose(t, j)
	b := readFile(t, path)
	offs := recordOffsets(t, b)
	for _, off := range offs[:len(offs)-1] {
		if v := b[off+recordHeaderSize]; v != intentVersion {
			t.Fatalf("compacted intent at %d has version %d, want %d", off, v, intentVersion)
		}
	}
	j = openTestJournal(t, path, quietOptions())
	sameRecords(t, "compacted", records(j), []Record{recordOf(old), recordOf(fresh)})
	mustClose(t, j)
}

// TestJournalRefusesANonPositiveKeyLifetime: Begin refuses an intent
// without a key lifetime, and writes nothing.
// Clause: J10.5.
func TestJournalRefusesANonPositiveKeyLifetime(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	for _, ttl := range []time.Duration{0, -time.Second} {
		in := testIntent(1)
		in.KeyTTL = ttl
		if err := j.Begin(in); !errors.Is(err, ErrInvalidOperation) {
			t.Fatalf("Begin with KeyTTL %v = %v, want ErrInvalidOperation", ttl, err)
		}
	}
	if st := j.Stats(); st.Records != 0 || st.Operations != 0 {
		t.Fatalf("stats after refused Begins = %+v, want nothing written", st)
	}
	mustClose(t, j)
}
