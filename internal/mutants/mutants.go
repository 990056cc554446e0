package main

// The mutants: one deliberate breakage of each promise README's Guarantees
// table makes, and the tests that must fail under it. Each edit replaces
// text that occurs exactly once in its file (TestMutantsApply keeps it so).

// mutant is one breakage.
type mutant struct {
	Name  string   // what breaks, as a reader of the Guarantees table says it
	Rules string   // the rules it breaks
	Edits []edit   // applied together
	Pkg   string   // the package whose tests must catch it
	Tests []string // test names; every one must fail
}

// edit replaces Old, which occurs exactly once in File, by New.
type edit struct {
	File string // relative to the module root
	Old  string
	New  string
}

var mutants = []mutant{
	{
		Name: "a fresh key on the wire, the journaled one reported", Rules: "C1.1",
		Edits: []edit{{File: "client.go", Old: "\tout.Header.Set(c.cfg.KeyHeader, c.keyValue(op.Key))\n",
			New: "\twireKey, _ := newKey()\n\tout.Header.Set(c.cfg.KeyHeader, c.keyValue(wireKey))\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaos"},
	},
	{
		Name: "502 taken for a final answer", Rules: "C7.2",
		Edits: []edit{{File: "retry.go", Old: "\t\tcase http.StatusRequestTimeout:\n",
			New: "\t\tcase http.StatusBadGateway:\n\t\t\treturn false, nil\n\t\tcase http.StatusRequestTimeout:\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaos"},
	},
	{
		Name: "no per-operation lock; the loser of the Begin race sends under the winner's key at once", Rules: "C11.2",
		Edits: []edit{
			{File: "journal_file_claim.go", Old: "j.running.Lock(ctx, id)",
				New: "func(context.Context, string) (func(), error) { return func() {}, nil }(ctx, id)"},
		},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaosConcurrentDoOfOneOperation"},
	},
	{
		Name: "QuotedKey ignored", Rules: "C12",
		Edits: []edit{{File: "client.go", Old: "\tif c.cfg.QuotedKey {\n\t\treturn strconv.Quote(key)\n\t}\n",
			New: "\t_ = strconv.Quote\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaosStandardClient"},
	},
	{
		Name: "a Do its caller gave up on recorded as rejected", Rules: "C8.4, C9.2",
		Edits: []edit{{File: "client.go", Old: "\t\treturn result{}, c.unknown(a, resp, err)\n",
			New: "\t\tif ctx.Err() != nil && op.ID != \"\" {\n\t\t\top.State, op.Status = Rejected, 499\n\t\t\tclaim.Complete(ctx, op)\n\t\t}\n\t\treturn result{}, c.unknown(a, resp, err)\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaosCallerGivesUp"},
	},
	{
		Name: "a redirect to another scheme on the same host and port followed", Rules: "C13.5",
		Edits: []edit{{File: "redirect.go", Old: "return strings.EqualFold(r.URL.Scheme, s.URL.Scheme) && strings.EqualFold(rh, sh) && rp == sp",
			New: "return strings.EqualFold(rh, sh) && rp == sp"}},
		Pkg: ".", Tests: []string{"TestForeignRedirectOrigins"},
	},
	{
		Name: "the Host header left out of the origin", Rules: "C13.6",
		Edits: []edit{{File: "redirect.go", Old: "\thost := r.Host\n", New: "\thost := \"\"\n"}},
		Pkg:   ".", Tests: []string{"TestForeignRedirectOrigins", "TestRedirectRuleDetails"},
	},
	{
		Name: "a 409 marked Idempotent-Replayed: false taken for the stored answer", Rules: "C7.3, C7.5",
		Edits: []edit{{File: "retry.go", Old: "return strings.EqualFold(strings.TrimSpace(resp.Header.Get(\"Idempotent-Replayed\")), \"true\")",
			New: "return strings.TrimSpace(resp.Header.Get(\"Idempotent-Replayed\")) != \"\""}},
		Pkg: ".", Tests: []string{"TestForeignConflictNotMarkedReplayedIsRetried"},
	},
	{
		Name: "the key added beside the caller's key header, not set", Rules: "C1.3",
		Edits: []edit{{File: "client.go", Old: "\tout.Header.Set(c.cfg.KeyHeader, c.keyValue(op.Key))\n",
			New: "\tout.Header.Add(c.cfg.KeyHeader, c.keyValue(op.Key))\n"}},
		Pkg: ".", Tests: []string{"TestForeignCallerSetsItsOwnKeyHeader"},
	},
	{
		Name: "a caller's key header in another case sent beside the key", Rules: "C1.3",
		Edits: []edit{{File: "client.go", Old: "if name != c.cfg.KeyHeader && strings.EqualFold(name, c.cfg.KeyHeader) {",
			New: "if name != c.cfg.KeyHeader && name == c.cfg.KeyHeader {"}},
		Pkg: ".", Tests: []string{"TestForeignCallerSetsItsOwnKeyHeader"},
	},
	{
		Name: "a credential parameter joined by a dot written with its value", Rules: "C14.5",
		Edits: []edit{{File: "secrets.go", Old: "if at == 0 || !isLetterOrDigit(name[at-1]) || camelBoundary(name[at-1], name[at]) {",
			New: "if at == 0 || name[at-1] == '_' || name[at-1] == '-' || camelBoundary(name[at-1], name[at]) {"}},
		Pkg: ".", Tests: []string{"TestRedactedParamSpellings"},
	},
	{
		Name: "a camelCase credential parameter written with its value", Rules: "C14.5",
		Edits: []edit{{File: "secrets.go", Old: "if at == 0 || !isLetterOrDigit(name[at-1]) || camelBoundary(name[at-1], name[at]) {",
			New: "if at == 0 || !isLetterOrDigit(name[at-1]) {"}},
		Pkg: ".", Tests: []string{"TestRedactedParamSpellings", "TestNoSecretsAtRest"},
	},
	{
		Name: "an Authorization header recorded with the outcome", Rules: "C14.1",
		Edits: []edit{{File: "secrets.go", Old: "\"Cookie\", \"Authorization\", \"Proxy-Authorization\",",
			New: "\"Cookie\", \"Proxy-Authorization\","}},
		Pkg: ".", Tests: []string{"TestEveryCredentialHeaderUnrecorded"},
	},
	{
		Name: "an OPTIONS request without an operation sent with a key", Rules: "C12.3",
		Edits: []edit{{File: "redirect.go", Old: "case http.MethodGet, http.MethodHead, http.MethodOptions:",
			New: "case http.MethodGet, http.MethodHead:"}},
		Pkg: ".", Tests: []string{"TestSafeMethodsPassThroughWithoutAKey"},
	},
	{
		Name: "a GET named as an operation passed through without a key", Rules: "C12.1",
		Edits: []edit{{File: "client.go", Old: "\treturn named || !safeMethod(req.Method)\n",
			New: "\treturn named && req.Method != http.MethodGet || !safeMethod(req.Method)\n"}},
		Pkg: ".", Tests: []string{"TestSafeMethodsPassThroughWithoutAKey"},
	},
	{
		Name: "a completed operation presented with another body answered from the journal", Rules: "C5.2",
		Edits: []edit{{File: "client.go", Old: "case op.Fingerprint != fp && !c.movedFrom(op, req, body): // rebase.go",
			New: "case op.Fingerprint != fp && op.State == Pending && !c.movedFrom(op, req, body): // rebase.go"}},
		Pkg: ".", Tests: []string{"TestMismatchRefusedInEveryState"},
	},
	{
		Name: "a 408 taken for a final answer", Rules: "C7.2",
		Edits: []edit{{File: "retry.go", Old: "\t\tcase http.StatusRequestTimeout:\n\t\t\treturn true, fmt.Errorf(\"unexpected HTTP status %s\", resp.Status)\n",
			New: "\t\tcase http.StatusRequestTimeout:\n\t\t\treturn false, nil\n"}},
		Pkg: ".", Tests: []string{"TestRetryClassification"},
	},
	{
		Name: "Retry-After honoured on 429 and 503 only", Rules: "C7.9",
		Edits: []edit{{File: "retry.go", Old: "view := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: resp.Header}",
			New: "view := &http.Response{StatusCode: resp.StatusCode, Header: resp.Header}"}},
		Pkg: ".", Tests: []string{"TestRetryAfter"},
	},
	{
		Name: "a 308 within the origin not followed", Rules: "C13.1",
		Edits: []edit{{File: "redirect.go", Old: "\tcase http.StatusTemporaryRedirect, http.StatusPermanentRedirect:\n\t\treturn sameOrigin(req, via[0])\n",
			New: "\tcase http.StatusTemporaryRedirect:\n\t\treturn sameOrigin(req, via[0])\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileRedirects"},
	},
	{
		Name: "a 303 taken for a redirect left unfollowed", Rules: "C13.2",
		Edits: []edit{{File: "redirect.go", Old: "\tcase http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:\n",
			New: "\tcase http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileRedirects"},
	},
	{
		Name: "a bounded header keeps the Location only if it still fits", Rules: "C3.2",
		Edits: []edit{{File: "header.go", Old: "var firstKept = []string{\"Location\", \"Content-Location\",",
			New: "var firstKept = []string{\"Content-Location\","}},
		Pkg: ".", Tests: []string{"TestRecordedHeaderKeepsWhatSaysWhatBecameOfTheRequest"},
	},
	{
		Name: "a completed operation past KeyTTL refused as expired", Rules: "C6.5",
		Edits: []edit{{File: "client.go", Old: "case op.State == Pending && !c.keyUsable(op.Created, c.now()):",
			New: "case !c.keyUsable(op.Created, c.now()):"}},
		Pkg: ".", Tests: []string{"TestCompletedOperationAnsweredAfterCompaction"},
	},
	{
		Name: "the user name kept in a written URL", Rules: "C14.4",
		Edits: []edit{{File: "secrets.go", Old: "\tc.User = nil\n",
			New: "\tif c.User != nil {\n\t\tc.User = url.User(c.User.Username())\n\t}\n"}},
		Pkg: ".", Tests: []string{"TestJournalURLRedacted"},
	},
	{
		Name: "the method left out of the fingerprint", Rules: "C5.1",
		Edits: []edit{{File: "keys.go", Old: "\tio.WriteString(h, method)\n\th.Write([]byte{0})\n",
			New: "\th.Write([]byte{0})\n"}},
		Pkg: ".", Tests: []string{"TestMismatchRefusedWithoutSending", "TestMismatchRefusedInEveryState"},
	},
	{
		Name: "an https URL without a port taken for port 80", Rules: "C13.5",
		Edits: []edit{{File: "redirect.go", Old: "\t\treturn u.Hostname(), \"443\"\n", New: "\t\treturn u.Hostname(), \"80\"\n"}},
		Pkg:   ".", Tests: []string{"TestForeignRedirectOrigins"},
	},
	{
		Name: "the server answers a retry of a key in flight as if it were done", Rules: "S4",
		Edits: []edit{{File: "testserver/idempotency.go", Old: "writeProblem(w, problem(http.StatusConflict, ProblemInFlight,",
			New: "writeProblem(w, problem(http.StatusCreated, ProblemInFlight,"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientAgainstReferenceServer"},
	},
	{
		Name: "a new key minted on resume", Rules: "C1.2",
		Edits: []edit{{File: "client.go", Old: "\t\treturn op, fmt.Errorf(\"idem: operation %q (key %s, minted %s): %w\",\n\t\t\tid, op.Key, op.Created.Format(time.RFC3339), ErrKeyExpired)\n\t}\n\treturn op, nil\n",
			New: "\t\treturn op, fmt.Errorf(\"idem: operation %q (key %s, minted %s): %w\",\n\t\t\tid, op.Key, op.Created.Format(time.RFC3339), ErrKeyExpired)\n\t}\n\tif op.State == Pending {\n\t\top.Key, _ = newKey()\n\t}\n\treturn op, nil\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientCrash", "TestClientAndServerCrash"},
	},
	{
		Name: "a claim ignores another machine's lease", Rules: "F3",
		Edits: []edit{
			{File: "pgjournal/claim.go", Old: "AND (lease_until IS NULL OR lease_until <= clock_timestamp() OR (lease_owner",
				New: "AND (true OR (lease_owner"},
			{File: "pgjournal/claim.go", Old: "case live != nil && *live && owner != nil && until != nil && !(*owner == j.opt.Owner && fence == kept):",
				New: "case live != nil && *live && owner != nil && until != nil && false:"},
		},
		Pkg: "./pgjournal", Tests: []string{"TestModel", "TestOneSenderAtATime"},
	},
	{
		Name: "the loser of a race to begin overwrites the winner's intent with its key", Rules: "F1, F2",
		Edits: []edit{{File: "pgjournal/claim.go", Old: "ON CONFLICT (namespace, op_id) DO NOTHING`",
			New: "ON CONFLICT (namespace, op_id) DO UPDATE SET op_key = excluded.op_key, lease_owner = excluded.lease_owner, fence = idem_operations.fence + 1`"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestBatchAcrossProcesses", "TestFleetCrash"},
	},
	{
		Name: "a shared journal lists equal times in its database's collation order", Rules: "J8",
		Edits: []edit{{File: "pgjournal/journal.go", Old: "return strings.Compare(a.ID, b.ID)",
			New: "return strings.Compare(strings.ToLower(a.ID), strings.ToLower(b.ID))"}},
		Pkg: "./pgjournal", Tests: []string{"TestConforms"},
	},
	{
		Name: "a stale holder's release frees the next holder's lease", Rules: "F5.4",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "WHERE namespace = $1 AND op_id = $2 AND fence = $3`, c.j.opt.Namespace, c.id, c.fence)",
			New: "WHERE namespace = $1 AND op_id = $2 AND $3::bigint > 0`, c.j.opt.Namespace, c.id, c.fence)"}},
		Pkg: "./pgjournal", Tests: []string{"TestAStaleHolderWakesAfterATakeover", "TestThreeMachinesTwoStaleHolders"},
	},
	{
		Name: "a renewal checks that the lease is held, not by whom", Rules: "F5.3",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "AND fence = $3 AND lease_owner IS NOT NULL`",
			New: "AND $3::bigint > 0 AND lease_owner IS NOT NULL`"}},
		Pkg: "./pgjournal", Tests: []string{"TestAStaleHolderWakesAfterATakeover", "TestThreeMachinesTwoStaleHolders"},
	},
	{
		Name: "an outcome fenced by the pending state alone", Rules: "F5.2",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "AND fence = $3 AND state = 1 AND",
			New: "AND $3::bigint > 0 AND state = 1 AND"}},
		Pkg: "./pgjournal", Tests: []string{"TestAStaleHolderWakesAfterATakeover", "TestThreeMachinesTwoStaleHolders"},
	},
	{
		Name: "a second takeover carries the first takeover's fence", Rules: "F5.1",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "interval '1 microsecond', fence = fence + 1",
			New: "interval '1 microsecond', fence = 2"}},
		Pkg: "./pgjournal", Tests: []string{"TestThreeMachinesTwoStaleHolders"},
	},
	{
		Name: "a lease renewed every LeaseTTL, not every third of it", Rules: "F3.3",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "\ttick := time.NewTimer(ttl / 3)\n",
			New: "\ttick := time.NewTimer(ttl)\n"}},
		Pkg: "./pgjournal", Tests: []string{"TestALeaseIsRenewedWhileTheAttemptRuns"},
	},
	{
		Name: "the database's clock read at Open only", Rules: "F4.4",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "\tc.j.clock.set(dbNow)\n",
			New: "\t_ = dbNow\n"}},
		Pkg: "./pgjournal", Tests: []string{"TestTheDatabasesClockIsReadAtEveryClaim"},
	},
	{
		Name: "a claim reads the operation of another namespace", Rules: "F2.3",
		Edits: []edit{{File: "pgjournal/claim.go",
			Old: "\tFROM idem_operations WHERE namespace = $1 AND op_id = $2`\n",
			New: "\tFROM idem_operations WHERE $1::text <> '' AND op_id = $2 ORDER BY namespace LIMIT 1`\n"}},
		Pkg: "./pgjournal", Tests: []string{"TestANamespaceIsAJournalOfItsOwn"},
	},
	{
		Name: "a statement past Options.Timeout taken for the caller's doing", Rules: "F6.2",
		Edits: []edit{{File: "pgjournal/journal.go",
			Old: "\treturn classify(ctx, fn(sctx))\n",
			New: "\treturn classify(sctx, fn(sctx))\n"}},
		Pkg: "./pgjournal", Tests: []string{"TestADatabaseThatStopsAnsweringFailsDoBeforeSending"},
	},
	{
		Name: "a resumed charge captures again under a new downstream key", Rules: "S5",
		Edits: []edit{{File: "testserver/charges.go", Old: "s.gateway.Capture(ctx, row.downstreamKey, ",
			New: "s.gateway.Capture(ctx, row.downstreamKey+token, "}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestServerCrash"},
	},
	{
		Name: "a stale request's release frees the new holder's lock", Rules: "S5.4",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "`UPDATE idempotency_keys SET locked_at = NULL, lock_token = NULL WHERE id = ? AND lock_token = ?`",
			New: "`UPDATE idempotency_keys SET locked_at = NULL, lock_token = NULL WHERE id = ? AND ? <> ''`"}},
		Pkg: "./testserver", Tests: []string{"TestAStaleChargeWakesWhileTheNewHolderIsInTheGateway", "TestAStaleChargeWakesWhileTheNewHolderCommits"},
	},
	{
		Name: "a recovery point recorded without the lock token; only the last phase checks it", Rules: "S5.4",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "WHERE id = ? AND lock_token = ?`,\n\t\t\tpoint, gatewayChargeID,",
			New: "WHERE id = ? AND ? <> ''`,\n\t\t\tpoint, gatewayChargeID,"}},
		Pkg: "./testserver", Tests: []string{"TestAStaleChargeWakesWhileTheNewHolderIsInTheGateway"},
	},
	{
		Name: "the last phase commits without the lock token; the recovery points check it", Rules: "S5.4",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "WHERE id = ? AND lock_token = ?`,\n\t\t\tpoint, resp.Status,",
			New: "WHERE id = ? AND ? <> ''`,\n\t\t\tpoint, resp.Status,"}},
		Pkg: "./testserver", Tests: []string{"TestAStaleChargeWakesWhileTheNewHolderCommits"},
	},
	{
		Name: "the sweeper clears a key from every client's business rows", Rules: "S2.2, S6.3",
		Edits: []edit{{File: "testserver/sweeper.go",
			Old: "WHERE k.client_id = `+table+`.client_id AND k.key = ",
			New: "WHERE k.key = "}},
		Pkg: "./testserver", Tests: []string{"TestTheSweeperTellsTwoClientsKeysApart"},
	},
	{
		Name: "the downstream key derived from the client's key, not from its row", Rules: "S2.2, S5.1",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "downstreamKey: \"idem-testserver-\" + uuid.NewString(),",
			New: "downstreamKey: \"idem-testserver-\" + m.key + uuid.NewString()[:0],"}},
		Pkg: "./testserver", Tests: []string{"TestTheSweeperTellsTwoClientsKeysApart"},
	},
	{
		Name: "the 409 of a key in flight says it is replayed", Rules: "S4.4",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "\t\tw.Header().Set(\"Retry-After\", strconv.FormatInt(secs, 10))\n",
			New: "\t\tw.Header().Set(\"Retry-After\", strconv.FormatInt(secs, 10))\n\t\tw.Header().Set(HeaderReplayed, \"true\")\n"}},
		Pkg: "./testserver", Tests: []string{"TestS4OnlyAReplayIsMarkedReplayed"},
	},
	{
		Name: "another request refused only while its key is locked or finished", Rules: "S4.2",
		Edits: []edit{{File: "testserver/idempotency.go",
			Old: "\tcase !bytes.Equal(row.fingerprint, m.fingerprint[:]):\n",
			New: "\tcase !bytes.Equal(row.fingerprint, m.fingerprint[:]) && (row.lockedAt.Valid || row.recoveryPoint == pointFinished):\n"}},
		Pkg: "./testserver", Tests: []string{"TestS4AnotherRequestIsRefusedWhateverTheRowsState"},
	},
	{
		Name: "the server's fingerprint without the separator after the method", Rules: "S4.3",
		Edits: []edit{{File: "testserver/request.go",
			Old: "\tio.WriteString(h, method)\n\th.Write([]byte{0})\n",
			New: "\tio.WriteString(h, method)\n"}},
		Pkg: "./testserver", Tests: []string{"TestFingerprintSeparatesFields"},
	},
	{
		Name: "the server's fingerprint without the method", Rules: "S4.3",
		Edits: []edit{{File: "testserver/request.go",
			Old: "\tio.WriteString(h, method)\n",
			New: "\t_ = method\n"}},
		Pkg: "./testserver", Tests: []string{"TestFingerprintSeparatesFields"},
	},
	{
		Name: "Begin returns before its fsync", Rules: "C2.1",
		Edits: []edit{{File: "internal/filejournal/append.go", Old: "\tj.maybeCompact()\n\treturn j.waitDurable(seq)\n",
			New: "\tj.maybeCompact()\n\t_ = seq\n\treturn nil\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientPowerCut", "TestDiskFsyncFailureNeverSendsTheUnsyncedIntent"},
	},
	{
		Name: "what recovery read is not made durable before a resume sends it", Rules: "C2.3",
		Edits: []edit{{File: "internal/filejournal/journal.go", Old: "\tif err == nil && j.truncated == 0 && j.records > 0 {\n",
			New: "\tif false {\n"}},
		Pkg: ".", Tests: []string{"TestResumedIntentIsDurableBeforeItIsSent"},
	},
	{
		Name: "a group commit counts as synced what was written during its fsync", Rules: "J5, C2",
		Edits: []edit{{File: "internal/filejournal/append.go", Old: "\t\t} else if target > j.syncedSeq {\n\t\t\tj.syncedSeq = target\n",
			New: "\t\t} else if target > j.syncedSeq {\n\t\t\tj.syncedSeq = j.writeSeq\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientPowerCut"},
	},
	{
		Name: "no torn-tail truncation", Rules: "J2",
		Edits: []edit{{File: "internal/filejournal/recover.go", Old: "\tif err := f.Truncate(off); err != nil {\n",
			New: "\tif err := error(nil); err != nil {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientPowerCut", "TestDiskShortWriteLeavesATornTail"},
	},
	{
		Name: "no KeyTTL check between retries", Rules: "C6.3",
		Edits: []edit{{File: "retry.go", Old: "\tif !a.c.keyUsable(a.created, a.c.now().Add(wait)) {\n",
			New: "\tif false {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestRetriesStopAtKeyTTL", "TestExpiryEndToEnd"},
	},
	{
		Name: "no AttemptTimeout margin before KeyTTL", Rules: "C6.2",
		Edits: []edit{{File: "client.go", Old: "\treturn at.Add(c.cfg.AttemptTimeout).Sub(created) < c.cfg.KeyTTL\n",
			New: "\treturn at.Sub(created) < c.cfg.KeyTTL\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestRetriesStopAtKeyTTL", "TestExpiryEndToEnd"},
	},
	{
		Name: "an intent whose fsync failed stays pending in memory", Rules: "J6, C2",
		Edits: []edit{{File: "internal/filejournal/journal.go", Old: "\t\tj.forgetUnsynced()\n",
			New: "\t\t_ = j.forgetUnsynced\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestDiskFsyncFailureNeverSendsTheUnsyncedIntent"},
	},
	{
		Name: "compaction forgets completed operations past KeyTTL", Rules: "C4, J7",
		Edits: []edit{{File: "internal/filejournal/compact.go", Old: "\treturn j.opt.ForgetAfter <= 0 || e.completedWithin(now, j.opt.ForgetAfter)\n",
			New: "\treturn false\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestCompletedOperationIsNotResentAfterCompaction"},
	},
	{
		Name: "no completion record", Rules: "C3.1, C4.1",
		Edits: []edit{{File: "client.go", Old: "\t\tif err := claim.Complete(context.WithoutCancel(ctx), op); err != nil {\n",
			New: "\t\tif err := error(nil); err != nil {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestCompletedOperationIsNotResentAfterCompaction"},
	},
	{
		Name: "mid-file damage cut as a torn tail", Rules: "J3",
		Edits: []edit{{File: "internal/filejournal/recover.go", Old: "\tif err != nil || !found {\n\t\treturn \"\", err\n\t}\n",
			New: "\tif err != nil || !found || true {\n\t\treturn \"\", err\n\t}\n"}},
		Pkg: ".", Tests: []string{"TestModel"},
	},
	{
		Name: "redirects followed as net/http would", Rules: "C13.3, C13.4",
		Edits: []edit{{File: "redirect.go", Old: "\t\tif !mayFollow(req, via) {\n",
			New: "\t\tif false {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileRedirects"},
	},
	{
		Name: "a 409 without Retry-After taken for a refusal", Rules: "C7.3",
		Edits: []edit{{File: "retry.go", Old: "\t\t\tif !replayed(resp) {\n",
			New: "\t\t\tif !replayed(resp) && resp.Header.Get(\"Retry-After\") != \"\" {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileBareConflictWhileInFlight"},
	},
	{
		Name: "the journal's path taken as given, symlinks unresolved", Rules: "J4",
		Edits: []edit{{File: "internal/filejournal/journal.go", Old: "\tif j.file, err = resolvePath(path); err != nil {\n",
			New: "\tif j.file, err = filepath.Abs(path); err != nil {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileSecondWriterThroughAnotherName", "TestHostileCompactionThroughASymlink"},
	},
	{
		Name: "hard links not counted", Rules: "J4",
		Edits: []edit{{File: "internal/filejournal/lock.go", Old: "\tif n, ok := fsutil.LinkCount(fi); ok && n > 1 {\n",
			New: "\tif n, ok := fsutil.LinkCount(fi); ok && n > 1000 {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileSecondWriterThroughAnotherName"},
	},
	{
		Name: "a session cookie recorded with the outcome", Rules: "C14.1",
		Edits: []edit{{File: "client.go", Old: "recordableHeader(c.secrets.recordedHeader(resp.Header), c.cfg.MaxRecordedHeader)",
			New: "recordableHeader(resp.Header, c.cfg.MaxRecordedHeader)"}},
		Pkg: ".", Tests: []string{"TestNoSecretsAtRest"},
	},
	{
		Name: "an attempt's error names the URL with its token", Rules: "C14.6",
		Edits: []edit{{File: "retry.go", Old: "\terr = a.c.secrets.error(err) // the secrets rule", New: "\t_ = a.c.secrets.error // the secrets rule"}},
		Pkg:   ".", Tests: []string{"TestNoSecretsAtRest"},
	},
	{
		Name: "the response header recorded whole", Rules: "C3.2",
		Edits: []edit{{File: "client.go", Old: "op.Header, op.HeaderTruncated = recordableHeader(c.secrets.recordedHeader(resp.Header), c.cfg.MaxRecordedHeader)",
			New: "op.Header, op.HeaderTruncated = c.secrets.recordedHeader(resp.Header), false"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileHugeResponseHeader"},
	},
	{
		Name: "the server without a read timeout", Rules: "S9",
		Edits: []edit{{File: "testserver/instance.go", Old: "\t\t\tReadTimeout:       cfg.ReadTimeout,\n",
			New: ""}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileSlowClientsOfTheServer"},
	},
	{
		Name: "a body read back from the file without its data checksum", Rules: "J9",
		Edits: []edit{{File: "internal/filejournal/read.go",
			Old: "\tif binary.LittleEndian.Uint32(b[end:end+recordCRCSize]) != crc32.Update(typeCRC[t], castagnoli, payload) {\n",
			New: "\tif false {\n"}},
		Pkg: "./internal/filejournal", Tests: []string{"TestJournalReportsARecordChangedAfterOpen"},
	},
	{
		Name: "a serialization failure on PostgreSQL answered 500, not rerun", Rules: "S3, S9",
		Edits: []edit{{File: "testserver/dialect.go",
			Old: "\treturn errors.As(err, &pe) && (pe.Code == \"40001\" || pe.Code == \"40P01\")\n",
			New: "\treturn errors.As(err, &pe) && false\n"}},
		Pkg: "./testserver", Tests: []string{"TestPostgresConflictsAreRetried"},
	},
	{
		Name: "a batch waits for an operation another machine holds", Rules: "F7.2",
		Edits: []edit{{File: "batch.go", Old: "if r, held := c.runOne(ctx, op, false); !held {",
			New: "if r, held := c.runOne(ctx, op, true); !held {"}},
		Pkg: ".", Tests: []string{"TestABatchTakesOtherWorkFirst"},
	},
	{
		Name: "Begin under a claim that does not wait waits for the race's winner", Rules: "F7.1",
		Edits: []edit{{File: "pgjournal/claim.go", Old: "if err := c.acquire(ctx, c.wait); err != nil {",
			New: "if err := c.acquire(ctx, true); err != nil {"}},
		Pkg: "./pgjournal", Tests: []string{"TestBeginUnderTryClaimDoesNotWait"},
	},
	{
		Name: "a journal waits out its own lease after a failed release", Rules: "F8.1",
		Edits: []edit{{File: "pgjournal/claim.go", Old: "\tkept := j.keptFence(c.id)\n",
			New: "\tkept := int64(0)\n"}},
		Pkg: "./pgjournal", Tests: []string{"TestAJournalTakesBackItsOwnLeaseAtOnce"},
	},
}
