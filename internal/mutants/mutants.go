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
		Name: "a fresh key on the wire, the journaled one reported", Rules: "C1",
		Edits: []edit{{File: "client.go", Old: "\tout.Header.Set(c.cfg.KeyHeader, c.keyValue(op.Key))\n",
			New: "\twireKey, _ := newKey()\n\tout.Header.Set(c.cfg.KeyHeader, c.keyValue(wireKey))\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaos"},
	},
	{
		Name: "502 taken for a final answer", Rules: "C7",
		Edits: []edit{{File: "retry.go", Old: "\t\tcase http.StatusRequestTimeout:\n",
			New: "\t\tcase http.StatusBadGateway:\n\t\t\treturn false, nil\n\t\tcase http.StatusRequestTimeout:\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaos"},
	},
	{
		Name: "no per-operation lock; the loser of the Begin race sends under the winner's key at once", Rules: "C11",
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
		Name: "a Do its caller gave up on recorded as rejected", Rules: "C8, C9",
		Edits: []edit{{File: "client.go", Old: "\t\treturn result{}, c.unknown(a, resp, err)\n",
			New: "\t\tif ctx.Err() != nil && op.ID != \"\" {\n\t\t\top.State, op.Status = StateRejected, 499\n\t\t\tclaim.Complete(ctx, op)\n\t\t}\n\t\treturn result{}, c.unknown(a, resp, err)\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestChaosCallerGivesUp"},
	},
	{
		Name: "the server answers a retry of a key in flight as if it were done", Rules: "S4",
		Edits: []edit{{File: "testserver/idempotency.go", Old: "writeProblem(w, problem(http.StatusConflict, ProblemInFlight,",
			New: "writeProblem(w, problem(http.StatusCreated, ProblemInFlight,"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientAgainstReferenceServer"},
	},
	{
		Name: "a new key minted on resume", Rules: "C1",
		Edits: []edit{{File: "client.go", Old: "\t\treturn op, fmt.Errorf(\"idem: operation %q (key %s, minted %s): %w\",\n\t\t\tid, op.Key, op.Created.Format(time.RFC3339), ErrKeyExpired)\n\t}\n\treturn op, nil\n",
			New: "\t\treturn op, fmt.Errorf(\"idem: operation %q (key %s, minted %s): %w\",\n\t\t\tid, op.Key, op.Created.Format(time.RFC3339), ErrKeyExpired)\n\t}\n\tif op.State == StatePending {\n\t\top.Key, _ = newKey()\n\t}\n\treturn op, nil\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientCrash", "TestClientAndServerCrash"},
	},
	{
		Name: "a claim ignores another machine's lease", Rules: "F3",
		Edits: []edit{
			{File: "pgjournal/claim.go", Old: "AND fence = $3 AND state < 2\n\t\tAND (lease_until IS NULL OR lease_until <= clock_timestamp())",
				New: "AND fence = $3 AND state < 2"},
			{File: "pgjournal/claim.go", Old: "case live != nil && *live && owner != nil && until != nil:",
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
		Name: "a resumed charge captures again under a new downstream key", Rules: "S5",
		Edits: []edit{{File: "testserver/charges.go", Old: "s.gateway.Capture(ctx, row.downstreamKey, ",
			New: "s.gateway.Capture(ctx, row.downstreamKey+token, "}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestServerCrash"},
	},
	{
		Name: "Begin returns before its fsync", Rules: "C2",
		Edits: []edit{{File: "internal/filejournal/append.go", Old: "\tj.maybeCompact()\n\treturn j.waitDurable(seq)\n",
			New: "\tj.maybeCompact()\n\t_ = seq\n\treturn nil\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestClientPowerCut", "TestDiskFsyncFailureNeverSendsTheUnsyncedIntent"},
	},
	{
		Name: "what recovery read is not made durable before a resume sends it", Rules: "C2",
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
		Name: "no KeyTTL check between retries", Rules: "C6",
		Edits: []edit{{File: "retry.go", Old: "\tif !a.c.keyUsable(a.created, a.c.now().Add(wait)) {\n",
			New: "\tif false {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestRetriesStopAtKeyTTL", "TestExpiryEndToEnd"},
	},
	{
		Name: "no AttemptTimeout margin before KeyTTL", Rules: "C6",
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
		Name: "no completion record", Rules: "C3, C4",
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
		Name: "redirects followed as net/http would", Rules: "C13",
		Edits: []edit{{File: "redirect.go", Old: "\t\tif !mayFollow(req, via) {\n",
			New: "\t\tif false {\n"}},
		Pkg: "./internal/faultsuite", Tests: []string{"TestHostileRedirects"},
	},
	{
		Name: "a 409 without Retry-After taken for a refusal", Rules: "C7",
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
		Name: "a session cookie recorded with the outcome", Rules: "C14",
		Edits: []edit{{File: "client.go", Old: "recordableHeader(c.secrets.recordedHeader(resp.Header), c.cfg.MaxRecordedHeader)",
			New: "recordableHeader(resp.Header, c.cfg.MaxRecordedHeader)"}},
		Pkg: ".", Tests: []string{"TestNoSecretsAtRest"},
	},
	{
		Name: "an attempt's error names the URL with its token", Rules: "C14",
		Edits: []edit{{File: "retry.go", Old: "\terr = a.c.secrets.error(err) // the secrets rule", New: "\t_ = a.c.secrets.error // the secrets rule"}},
		Pkg:   ".", Tests: []string{"TestNoSecretsAtRest"},
	},
	{
		Name: "the response header recorded whole", Rules: "C3",
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
}
