package coordinator

import (
	"testing"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// TestKeyedFramesAreNeverRefusedForTheirBucketProducer: a client of
// Idempotency-Key knows nothing of the key's bucket producer, so a refusal
// about that producer (fenced, unknown, out of order after the bucket
// moved) reaches it as retryable; a producer session's own keeps its code.
func TestKeyedFramesAreNeverRefusedForTheirBucketProducer(t *testing.T) {
	for _, code := range []apierr.Code{apierr.ProducerFenced, apierr.UnknownProducer, apierr.OutOfOrderSequence} {
		err := apierr.New(code, "producer 7 epoch 1 is fenced by epoch 2")
		keyed := RefusalResponse(&orderlogpb.ProduceRequest{IdempotencyKey: "k"}, err)
		if keyed.ErrorCode != string(apierr.Unavailable) {
			t.Errorf("keyed frame refused with %s: answered %s, want UNAVAILABLE", code, keyed.ErrorCode)
		}
		session := RefusalResponse(&orderlogpb.ProduceRequest{ProducerId: 7, Epoch: 1}, err)
		if session.ErrorCode != string(code) {
			t.Errorf("session frame refused with %s: answered %s", code, session.ErrorCode)
		}
	}
	other := RefusalResponse(&orderlogpb.ProduceRequest{IdempotencyKey: "k"}, apierr.New(apierr.MessageTooLarge, "too big"))
	if other.ErrorCode != string(apierr.MessageTooLarge) {
		t.Errorf("keyed frame too large: answered %s, want MESSAGE_TOO_LARGE", other.ErrorCode)
	}
}
