package faultsuite

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Environment variables that size the scenarios. Unset, each takes the
// default stated beside it, which is what CI runs.
const (
	// EnvSeed replays a run: the seed every scenario logs at its start.
	// Default: a new seed from the clock.
	EnvSeed = "IDEM_SEED"

	// EnvChaosOps is the number of operations of TestChaos. Default 2000.
	EnvChaosOps = "IDEM_CHAOS_OPS"

	// EnvCrashOps is the number of operations of the crash scenarios
	// (client, server, both). Default 1000.
	EnvCrashOps = "IDEM_CRASH_OPS"

	// EnvClientKills is how many times TestClientCrash SIGKILLs the batch
	// client. Default 10.
	EnvClientKills = "IDEM_CLIENT_KILLS"

	// EnvServerKills is how many times TestServerCrash SIGKILLs the
	// server. Default 10.
	EnvServerKills = "IDEM_SERVER_KILLS"

	// EnvBothKills is how many SIGKILLs TestClientAndServerCrash deals,
	// alternating between the client and the server. Default 10.
	EnvBothKills = "IDEM_BOTH_KILLS"

	// EnvReplicaOps is the number of operations of TestReplicasBehindABalancer.
	// Default 1000.
	EnvReplicaOps = "IDEM_REPLICA_OPS"

	// EnvReplicaKillOps is the number of operations of TestReplicaKills.
	// Default 3000.
	EnvReplicaKillOps = "IDEM_REPLICA_KILL_OPS"

	// EnvReplicaKills is how many times TestReplicaKills SIGKILLs a
	// replica. Default 10.
	EnvReplicaKills = "IDEM_REPLICA_KILLS"

	// EnvDialectOps is the number of operations of TestDialectChaos and
	// TestDialectClientCrash, per dialect. Default 40.
	EnvDialectOps = "IDEM_DIALECT_OPS"

	// EnvDialectKills is how many times TestDialectClientCrash SIGKILLs
	// the batch client, per dialect. Default 1.
	EnvDialectKills = "IDEM_DIALECT_KILLS"
)

// Defaults of the sizes above.
const (
	DefaultChaosOps    = 2000
	DefaultCrashOps    = 1000
	DefaultClientKills = 10
	DefaultServerKills = 10
	DefaultBothKills   = 10

	DefaultReplicaOps     = 1000
	DefaultReplicaKillOps = 3000
	DefaultReplicaKills   = 10

	DefaultDialectOps   = 40
	DefaultDialectKills = 1
)

// SizeFromEnv returns the positive integer in the environment variable
// name, or def when it is unset or empty.
func SizeFromEnv(name string, def int) (int, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("faultsuite: %s=%q: want a positive integer", name, s)
	}
	return n, nil
}

// SeedFromEnv returns the seed in EnvSeed, or a new one from the clock when
// it is unset or empty.
func SeedFromEnv() (int64, error) {
	s := os.Getenv(EnvSeed)
	if s == "" {
		return time.Now().UnixNano(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("faultsuite: %s=%q: want an integer: %w", EnvSeed, s, err)
	}
	return n, nil
}
