// Package keys is the one place that spells orderlog's etcd key layout.
//
// Every key lives under Prefix. Values are owned by the package named next to
// each key; no other package writes them. etcd holds only small, slowly
// changing state: never one key per message, grant or hole.
package keys

import "fmt"

// Prefix is the root of every orderlog key in etcd.
const Prefix = "orderlog/"

const (
	// SeqElection is the concurrency.Election prefix of the sequencer (sequencer).
	SeqElection = Prefix + "seq/election"
	// SeqEpoch holds the current sequencer epoch E as a decimal string (sequencer).
	// Creating a ledger compares it, so no ledger of an older epoch can be made.
	SeqEpoch = Prefix + "seq/epoch"
	// SeqReserved holds R, the exclusive end of reserved offsets (sequencer).
	SeqReserved = Prefix + "seq/reserved"
	// SeqCommitLedgers records the commit ledger ids of each epoch (sequencer).
	SeqCommitLedgers = Prefix + "seq/commit-ledgers"
	// SeqCheckpoint points at the newest complete commit-log checkpoint:
	// its ledger, what it covers and the commit ledger the log goes on
	// with (sequencer; docs/format/commit-log.md §5).
	SeqCheckpoint = Prefix + "seq/checkpoint"
	// RereplicationElection is the concurrency.Election prefix of the
	// re-replication worker, one in the cluster (ingest/rereplicate).
	RereplicationElection = Prefix + "rereplication/election"
	// LedgerIDCounter is the last allocated ledger id (ingest/ledger).
	LedgerIDCounter = Prefix + "ledgers-next-id"
	// LedgersPrefix is the prefix of all ledger metadata keys (ingest/ledger).
	LedgersPrefix = Prefix + "ledgers/"
	// StoresPrefix is the prefix of WAL store registrations (ingest/wal's owner node).
	StoresPrefix = Prefix + "stores/"
	// IngestPrefix is the prefix of live ingest incarnations, each bound to
	// the node's etcd lease (ingest).
	IngestPrefix = Prefix + "ingest/"
	// ProducersPrefix is the prefix of producer records (ingest).
	ProducersPrefix = Prefix + "producers/"
	// ProducerNamesPrefix maps producer names to ids (ingest).
	ProducerNamesPrefix = Prefix + "producer-names/"
	// ProducerIDCounter is the last allocated producer id (ingest).
	ProducerIDCounter = Prefix + "producers-next-id"
	// TopicsPrefix is the prefix of topic records (ingest).
	TopicsPrefix = Prefix + "topics/"
	// LogStart holds the log start offset as a decimal string: offsets below
	// it are deleted by retention and reads of them answer
	// OFFSET_OUT_OF_RANGE. It only grows (ingest/retention).
	LogStart = Prefix + "log-start"
	// RetentionElection is the concurrency.Election prefix of the retention
	// worker, one in the cluster (ingest/retention).
	RetentionElection = Prefix + "retention/election"
	// LedgerDeletingPrefix marks ledgers retention is deleting (ingest/retention).
	LedgerDeletingPrefix = Prefix + "ledgers-deleting/"
	// Retained points at the retained set: the messages below the log start
	// that compacted topics and topics with a longer retention keep
	// (ingest/retention).
	Retained = Prefix + "retained"
	// TopicStarts holds, per topic with a byte limit of its own, the offset
	// below which its messages are past the limit and hidden from reads
	// (ingest/retention). Each only grows.
	TopicStarts = Prefix + "topic-starts"
	// TieringElection is the concurrency.Election prefix of the tiering
	// worker, one in the cluster (tiering).
	TieringElection = Prefix + "tiering/election"
	// TieringHead holds the archive's head: the archived watermark T, the
	// archive's first offset and the newest manifest segment (tiering).
	TieringHead = Prefix + "tiering/head"
	// TieringPlan holds the file the elected tiering worker is publishing,
	// recorded before its upload (tiering).
	TieringPlan = Prefix + "tiering/plan"
	// SchemasPrefix is the prefix of the schema registry's keys (schema):
	// SchemasPrefix+"next-id" (the last allocated schema id),
	// "ids/<id>" (a schema: format and text, never changed),
	// "hashes/<sha256>" (the id of a format+text, for reuse),
	// "subjects/<escaped subject>" (the subject's latest version),
	// "versions/<escaped subject>/<%010d version>" (one version's id),
	// "config" and "config/<escaped subject>" (compatibility levels),
	// "validation/<escaped subject>" (what produce checks of the topic).
	SchemasPrefix = Prefix + "schemas/"
)

// ProducerName is the key mapping a producer name to its id.
func ProducerName(name string) string { return ProducerNamesPrefix + name }

// Topic is the record key of one topic.
func Topic(name string) string { return TopicsPrefix + name }

// Ledger is the metadata key of one ledger. Ids are zero-padded so that a
// range read over LedgersPrefix returns ledgers in id order.
func Ledger(id uint64) string { return fmt.Sprintf("%s%020d", LedgersPrefix, id) }

func LedgerDeleting(id uint64) string { return fmt.Sprintf("%s%020d", LedgerDeletingPrefix, id) }

// Store is the registration key of one WAL store.
func Store(storeID string) string { return StoresPrefix + storeID }

// Ingest is the liveness key of one ingest incarnation.
func Ingest(incarnation string) string { return IngestPrefix + incarnation }

// Producer is the record key of one producer.
func Producer(producerID uint64) string { return fmt.Sprintf("%s%020d", ProducersPrefix, producerID) }
