module github.com/idemkit/idem/lab/testkit

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/jackc/pgx/v5 v5.12.0
	go.uber.org/goleak v1.3.0
)

require github.com/stretchr/testify v1.12.1 // indirect

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
