// Command payments is a small service built on package idemserver: plain
// net/http on SQLite, with one atomic mutation (POST /orders, a row written
// in the key's transaction) and one phased mutation (POST
// /orders/{id}/pay, a capture at a fake card gateway under a downstream
// key, then the order marked paid). Run it and call it with the idem
// client, or with curl:
//
//	go run ./examples/payments -addr 127.0.0.1:8090 -db payments.db
//	curl -H 'Idempotency-Key: k1' -d '{"item":"book","amount":1200}' http://127.0.0.1:8090/orders
//
// The same curl again gets the same answer, marked Idempotent-Replayed:
// true, and no second order.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemserver/sqlite"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	path := flag.String("db", "payments.db", "SQLite database file")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *path, log); err != nil {
		log.Error("payments", "err", err)
		os.Exit(1)
	}
}

func run(addr, path string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := newService(ctx, db, newGateway(), log)
	if err != nil {
		return err
	}
	defer svc.keys.Close()
	go svc.keys.Run(ctx) // sweeps expired keys until ctx ends

	srv := &http.Server{Addr: addr, Handler: svc.handler(),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	log.Info("listening", "addr", addr, "db", path)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
