package node

import (
	"context"

	"orderlog/ingest/rereplicate"
)

// startRereplication runs the re-replication worker (DESIGN §4) in every
// process with a WAL store; one of them is elected and copies closed
// ledgers that lost copies onto stores that lack them. It stops with ctx.
func (s *Server) startRereplication(ctx context.Context) {
	if s.store == nil {
		return
	}
	w, err := rereplicate.New(rereplicate.Config{Etcd: s.cli, Stores: s.dialer, Name: s.cfg.NodeName + "/" + s.store.StoreID(),
		Logger: s.logger, Events: s.events})
	if err != nil {
		s.logger.Error("re-replication worker not started", "err", err)
		return
	}
	go w.Run(ctx)
}
