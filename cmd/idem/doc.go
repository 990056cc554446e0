// Command idem shows, serves and uses idempotent HTTP operations: a demo of
// the whole story, the reference server, a curl-shaped idempotent request,
// and an inspector for the journals that make operations survive crashes.
//
// Usage:
//
//	idem <command> [arguments]
//
// The commands are:
//
//	chaos    run the fault proxy in front of a server, or balancing over its replicas
//	demo     charge a batch through faults and a crash, with idem and with careful retries
//	journal  list, show, settle, verify, salvage, copy or compact a journal
//	send     send one HTTP request as an idempotent operation, curl-style
//	serve    run the reference server (package testserver)
//
// Run "idem <command> -h" for a command's arguments and flags. Flags may come
// before or after the positional arguments; "--" ends the flags.
//
// # idem demo
//
//	idem demo [--ops 500] [--faults 0.25] [--seed 1] [--keep] [--no-progress]
//
// Demo starts two reference servers on SQLite files in a temporary folder,
// each behind a fault proxy breaking --faults of the requests in every way
// the network does (resets, answers lost after the commit, 502s, stalls,
// cut bodies, 429 and 503). It charges --ops invoices through the first
// with idem, from a batch process that it SIGKILLs midway and restarts on
// the same journal. Through the second it runs the job a careful user
// writes without idem: go-retryablehttp with one key per charge, minted in
// memory and reused by its retries, and a done file, fsync'd after each
// answer; it SIGKILLs that job at the same point and restarts it, and the
// restarted job skips the rows in its done file and sends the others under
// new keys. It ends with a table read from the servers' databases:
// attempts, retries by cause, replays, duplicate charges, split by where
// the invoice stood at the kill (in flight, answered but not yet recorded,
// or neither), and lost invoices.
// It exits 0 when idem charged every invoice exactly once, 1 otherwise.
// --keep keeps the folder (databases, journal, done file and the careful
// job's report) and prints its path.
//
// # idem chaos
//
//	idem chaos -upstream URL [-upstream URL ...] [-addr 127.0.0.1:8081] [-balance round-robin|random]
//	           [-rate 0.2] [-kinds reset,stall,...] [-seed 1] [-dialect NAME]
//
// Chaos runs the fault proxy (package testserver/chaos) in front of one
// server, or as the load balancer of several replicas of the reference
// server on one PostgreSQL database: each forwarded request goes to the
// next upstream in turn, or to one drawn from -seed. A replica that is down
// is answered 502, which the client retries. It prints "listening on URL"
// first and, on SIGINT or SIGTERM, one "counts:" line with what it did,
// per upstream. With -dialect, its in-flight fault (-kinds in-flight)
// answers as a server speaking that dialect would.
//
// # idem serve
//
//	idem serve [-addr 127.0.0.1:8080] [-db idem-testserver.db] [-dialect NAME] [-retention 24h] [fault flags]
//
// Serve runs the reference server with the flags of idem-testserver; "idem
// serve -h" lists them. -dialect makes it speak an API's idempotency
// dialect (stripe, adyen, square...): where the key goes, its answers, its
// retention. It prints "listening on URL" first and stops
// cleanly on SIGINT or SIGTERM.
//
// # idem send
//
//	idem send --journal PATH --op ID [-X POST] [-H 'Name: value']... [-d DATA|@FILE|@-]
//	          [--dialect NAME] [--timeout 10s] [--attempts 8] [--max-elapsed 2m] [--ttl 24h] [-i] [-v] URL
//
// Send sends the request as the operation ID, under one Idempotency-Key
// for every attempt, retrying what is safe to retry. With --journal, the key
// is fsync'd to the journal before the first byte is sent: after a crash or
// an unknown outcome, running the same command again resends under the same
// key, and once the operation is done or rejected, running it again prints
// the recorded response without sending anything (stderr says so). Without
// --journal the key lives in memory and is lost with the process; send warns.
// --dialect names the API's idempotency dialect (stripe, adyen, paypal,
// square...): where the key goes, how long the API keeps it (the default of
// --ttl) and how its answers read. The key lifetime is recorded with the
// operation when it is first sent, and a rerun judges the key by that
// record, whatever its own --ttl.
//
// The method is POST unless -X says otherwise, with or without -d: an
// idempotency key is for requests that change something. -d sends its
// argument, a file's bytes (@FILE) or stdin (@-) byte for byte; no
// Content-Type is added. The response body goes to stdout, after the status
// line and header with -i, also when the server rejected the request.
//
// # idem journal
//
//	idem journal ls|pending|expired|completed PATH|URL [--json]
//	idem journal show PATH|URL ID [--json]
//	idem journal settle PATH|URL ID --done STATUS|--rejected STATUS [--note TEXT]
//	idem journal settle PATH|URL ID --forget --i-understand-a-new-key [--completed]
//	idem journal dump PATH|URL        (JSON lines)
//	idem journal load PATH|URL        (JSON lines on stdin)
//	idem journal copy SRC DST
//	idem journal verify PATH
//	idem journal salvage SRC DST
//	idem journal compact PATH [--forget-after 0]
//	idem journal migrate URL
//
// A journal is a file PATH, or a postgres:// URL naming a shared journal
// (package pgjournal), whose #fragment is its namespace. A command that
// writes to a shared journal refuses a primary whose standbys are all
// asynchronous, since a failover to one can lose intents already sent,
// unless the URL says allow_async_replication=true (a parameter idem
// takes out before it connects).
//
// ls lists every operation, pending those a rerun resumes, expired the
// pending ones whose key is older than the key lifetime recorded with the
// operation (the server's retention when it was first sent: the server has
// forgotten the key, resending could apply them twice, so a person
// reconciles them), and
// completed the done and rejected ones, oldest first, as a table with the
// columns ID, STATE, KEY, CREATED, AGE, STATUS, METHOD and URL. With --json
// the output is a JSON array of objects with the fields id, state
// ("pending", "done" or "rejected"), expired, key_ttl, key, fingerprint, method, url,
// created, completed (null while pending) and status (null while pending).
// Show prints one operation in full with its recorded response header and
// body (binary bodies in base64); its --json object adds response (null
// while pending) with header, body_recorded, body_size, body_encoding ("text"
// or "base64") and body. These fields are kept stable.
//
// settle records by hand the outcome of a pending operation a person
// checked on the server (done or rejected, with a note), or forgets it (its
// next Do mints a new key, which the flag's name says). dump writes every
// operation as a JSON line; load and copy write operations into a journal,
// so a file journal moves into a shared one and back. verify reads a file
// journal whole and reports every problem with its offset; salvage writes
// what can still be read of a damaged file into a new one.
//
// The listings, show, dump, verify and salvage open a file journal
// read-only: they take no lock and change nothing on disk, a torn tail
// included, so they may run beside a process that is writing the journal.
// settle, load and copy take its lock, as compact does. Compact takes the
// journal's lock and rewrites it with its live operations: pending ones and
// those completed less than their key lifetime ago, whole; older completed ones keep a
// summary without response header and body, so their IDs are still answered
// and never sent again, until --forget-after (default never).
//
// # Exit codes
//
//	0  success; for send, the operation is done; for demo, idem was exact
//	1  other error (unreadable input, I/O); for demo,
//	   a duplicate or lost charge with idem
//	2  usage: bad flags, arguments or command
//	3  send: rejected, the server answered without applying the request
//	4  send: outcome unknown, the operation stays pending; rerun to resume
//	5  send: refused before sending (operation ID reused with a different
//	   request, key older than its recorded lifetime)
//	6  journal locked by another process, or its database down: wait and
//	   run the command again
//	7  journal corrupt (the message gives the offset of the damage) or not
//	   a journal; for verify, damage that is not a torn tail
//	8  no journal at the path: nothing there, a directory, a directory that
//	   does not exist, no permission, a read-only file system
package main
