package sequencer

import "fmt"

// EpochRecord is a confirmed commit record tagged with the epoch of the
// leader that wrote it.
type EpochRecord struct {
	Epoch uint64
	Record
}

// CommitMap is what a replay of commit-log entries yields.
type CommitMap struct {
	// C is the highest Watermark found: every offset below it is resolved
	// by the records.
	C uint64
	// Epoch is the highest epoch among the entries.
	Epoch uint64
	// Records are the Written and Hole records in log order.
	Records []EpochRecord
}

// Replay decodes commit-log entry payloads in log order (the confirmed
// entries of each commit ledger, older ledgers first). A reader replaying a
// commit ledger must stop at its LAC; a new leader replays the ledgers it
// recovered, up to their last entry.
func Replay(entries [][]byte) (CommitMap, error) {
	var cm CommitMap
	for i, p := range entries {
		epoch, records, err := DecodeCommitEntry(p)
		if err != nil {
			return CommitMap{}, fmt.Errorf("commit entry %d: %w", i, err)
		}
		cm.apply(epoch, records)
	}
	return cm, nil
}

func (cm *CommitMap) apply(epoch uint64, records []Record) {
	cm.Epoch = max(cm.Epoch, epoch)
	for _, r := range records {
		if r.Kind == KindWatermark {
			cm.C = max(cm.C, r.Watermark)
			continue
		}
		r.Seq = 0
		cm.Records = append(cm.Records, EpochRecord{Epoch: epoch, Record: r})
	}
}
