package faultsuite

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/testserver/chaos"
)

// numReplicas is how many replicas of the server the scenarios run.
const numReplicas = 3

// startReplicas starts numReplicas replicas of the server binary on the
// PostgreSQL database at dsn, with flags, and stops them when the test
// ends.
func startReplicas(t *testing.T, dsn string, args ...string) *Replicas {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := StartReplicas(ctx, serverBinary(t), dsn, dir, numReplicas, append([]string{"-log-level", "warn"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping the replicas: %v", err)
		}
		if t.Failed() {
			t.Logf("replica logs in %s", dir)
		}
	})
	return r
}

// replicasView is serverView for replicas on one database: what the
// database holds is read once, through replica 0; the replays are those of
// every replica added up, unless one was killed (its count started over).
func replicasView(t *testing.T, r *Replicas, w Workload, killed bool, wire *Wire) ServerView {
	t.Helper()
	v := serverView(t, r.Procs[0].URL, r.DSN, w, false, wire)
	if killed {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := newPooledClient()
	defer hc.CloseIdleConnections()
	v.Replays = 0
	for _, u := range r.URLs() {
		st, err := FetchStats(ctx, hc, u)
		if err != nil {
			t.Fatal(err)
		}
		v.Replays += st.Replays
	}
	return v
}

// requireTurns fails the test unless the balancer sent each replica its
// turn: forwarded requests split evenly, give or take one, and none failed
// (no replica was down).
func requireTurns(t *testing.T, counts chaos.Counts) {
	t.Helper()
	var forwarded []int
	for _, u := range counts.Upstreams {
		forwarded = append(forwarded, u.Forwarded)
	}
	if len(forwarded) != numReplicas || slices.Max(forwarded)-slices.Min(forwarded) > 1 {
		t.Errorf("the balancer forwarded %v to the replicas, want %d even shares", forwarded, numReplicas)
	}
	if counts.UpstreamErrors != 0 {
		t.Errorf("%d upstream errors with every replica up", counts.UpstreamErrors)
	}
}

// TestReplicasBehindABalancer is the client's integration run against
// three replicas of the reference server on one PostgreSQL database (S9),
// behind the fault proxy as their load balancer, round robin: 1,000
// operations from 16 workers of one client with a journal, 20% of the
// attempts faulted with every kind of fault the proxy knows. An attempt and
// its retry usually reach different replicas, so every replay, 409 and
// takeover crosses processes. Every operation must end done with exactly
// one effect, as the database shows.
func TestReplicasBehindABalancer(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvReplicaOps, DefaultReplicaOps)
	reps := startReplicas(t, pgtest.NewDatabase(t), "-lock-timeout", "1s", "-seed", strconv.FormatInt(seed, 10))
	w := Workload{ClientID: "replicas", Ops: ops}
	prepareInventory(t, reps.Procs[0].URL, w.ClientID)
	proxy, wire := listenBalancer(t, reps.URLs(), seed, 0.2)
	w.BaseURL = proxy.URL

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	j := openJournal(t)
	checker := NewChecker(w.IDs())
	c := newClient(t, j, checker)
	start := time.Now()
	errs := runWorkload(ctx, c, w, 16, checker)
	t.Logf("%d operations over %d replicas in %s", ops, numReplicas, time.Since(start).Round(time.Millisecond))
	requireNoErrors(t, errs)

	counts := proxy.Counts()
	t.Logf("proxy: %s", counts)
	for _, k := range chaos.AllKinds() {
		if counts.Faults[k] == 0 {
			t.Errorf("the proxy never injected %s", k)
		}
	}
	if share := float64(counts.Injected()) / float64(counts.Requests); share < 0.15 || share > 0.25 {
		t.Errorf("the proxy faulted %.1f%% of %d requests, want about 20%%", 100*share, counts.Requests)
	}
	requireTurns(t, counts)
	report(t, checker, "replicas", replicasView(t, reps, w, false, wire))
	requireJournalDone(t, j, w)
}

// TestReplicaKills runs a 3,000-operation workload from 16 workers of one
// client, with a journal, against three replicas on one PostgreSQL
// database behind the proxy (round robin, no faults of its own), and
// SIGKILLs a replica picked at random at least ten times, spread over the
// run, each time starting it again on its port after a random outage of up
// to 200ms. While a replica is down its turns are answered 502, and a
// request it was serving is left in flight in the database until another
// replica takes its key over. Every operation must end done with exactly
// one effect, and the gateway must have captured once per charge.
func TestReplicaKills(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvReplicaKillOps, DefaultReplicaKillOps)
	kills := sizeOf(t, EnvReplicaKills, DefaultReplicaKills)
	flags := []string{"-lock-timeout", "1s", "-seed", strconv.FormatInt(seed, 10)}
	reps := startReplicas(t, pgtest.NewDatabase(t), flags...)
	w := Workload{ClientID: "replica-kills", Ops: ops}
	prepareInventory(t, reps.Procs[0].URL, w.ClientID)
	proxy, wire := listenBalancer(t, reps.URLs(), seed, 0) // no faults: a witness of what reaches the replicas
	w.BaseURL = proxy.URL
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	checker := NewChecker(w.IDs())
	prog := newProgress(checker)
	c := newClient(t, openJournal(t), prog)
	finished := make(chan struct{})
	var errs []error
	start := time.Now()
	go func() {
		defer close(finished)
		errs = runWorkload(ctx, c, w, 16, prog)
	}()
	rng := rngOf(seed, 11)
	killedAt := make([]int, numReplicas)
	var restarts, outages []time.Duration
	for k := 1; k <= kills; k++ {
		// Spread the kills over the run by its progress, with some jitter.
		at := k*ops/(kills+2) + rng.IntN(ops/(2*(kills+2))+1)
		ok, err := prog.waitFor(ctx, at, finished)
		if err != nil {
			cancel()
			<-finished
			t.Fatalf("kill %d: %v", k, err)
		}
		if !ok {
			t.Fatalf("the workload ended after %d of %d kills", k-1, kills)
		}
		i := rng.IntN(numReplicas)
		outage := time.Duration(rng.IntN(201)) * time.Millisecond
		d, err := reps.Restart(ctx, i, outage, flags...)
		if err != nil {
			cancel()
			<-finished
			t.Fatalf("kill %d: %v", k, err)
		}
		killedAt[i]++
		restarts = append(restarts, d)
		outages = append(outages, outage)
	}
	<-finished
	elapsed := time.Since(start)
	requireNoErrors(t, errs)
	if n := reps.Kills(); n != kills {
		t.Errorf("the replicas were killed %d times, want %d", n, kills)
	}
	starts := make([]time.Duration, len(restarts))
	for i := range restarts {
		starts[i] = restarts[i] - outages[i]
	}
	slices.Sort(restarts)
	slices.Sort(starts)
	t.Logf("%d operations in %s; %d kills (per replica %v); kill to listening again: median %s, max %s; "+
		"of which the start, after the outage: median %s, max %s",
		ops, elapsed.Round(time.Millisecond), kills, killedAt,
		restarts[len(restarts)/2].Round(time.Millisecond), restarts[len(restarts)-1].Round(time.Millisecond),
		starts[len(starts)/2].Round(time.Millisecond), starts[len(starts)-1].Round(time.Millisecond))
	if failed := reps.FailedStarts(); len(failed) > 0 {
		first := strings.TrimSpace(failed[0].Error())
		t.Logf("%d starts of a replica after a kill exited before listening and were tried again; the first ended with: %s",
			len(failed), first[strings.LastIndex(first, "\n")+1:])
	}
	counts := proxy.Counts()
	t.Logf("proxy: %s", counts)
	r := report(t, checker, "replica-kills", replicasView(t, reps, w, true, wire))
	if r.Charges == 0 || r.Charges != r.Captures {
		t.Errorf("the gateway captured %d times for %d charges", r.Captures, r.Charges)
	}
}

// TestReplicasRefuseASQLitePath: replicas share a PostgreSQL database;
// a SQLite file cannot be shared between processes that way.
func TestReplicasRefuseASQLitePath(t *testing.T) {
	_, err := StartReplicas(context.Background(), "/nonexistent", t.TempDir()+"/server.db", t.TempDir(), 3)
	if err == nil {
		t.Fatal("StartReplicas accepted a SQLite file")
	}
	_, err = StartReplicas(context.Background(), "/nonexistent", "postgres://localhost/db", t.TempDir(), 0)
	if err == nil {
		t.Fatal("StartReplicas accepted 0 replicas")
	}
}
