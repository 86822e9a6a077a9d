package node

import (
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
)

// TestAdminActionsAreAuditedWithThePrincipal: topic creations (gRPC and
// HTTP) and an InitProducer that fences a producer's older instance are
// logged as audit lines naming the principal that asked, as token and ACL
// changes are; a refused creation and a new producer are not.
func TestAdminActionsAreAuditedWithThePrincipal(t *testing.T) {
	n := startAbuseNode(t, Config{}, "ops", "app")
	if _, err := orderlogpb.NewAuthClient(n.conn).AddAcl(as(n.ctx, n.root),
		&orderlogpb.AclEntry{Principal: "ops", Topic: "orders*", Operation: "admin"}); err != nil {
		t.Fatal(err)
	}
	admin := orderlogpb.NewAdminClient(n.conn)
	waitFor(t, 10*time.Second, "the ACL to apply", func() bool { // the node's watch sees it within milliseconds
		_, err := admin.CreateTopic(n.as("ops"), &orderlogpb.CreateTopicRequest{Name: "orders", Partitions: 4})
		return err == nil
	})
	if _, err := admin.CreateTopic(n.as("ops"), &orderlogpb.CreateTopicRequest{Name: "payments"}); err == nil {
		t.Fatal("ops created a topic outside its ACL")
	}
	status, _, body := httpDo(t, "POST", "http://"+n.s.HTTPAddr()+"/v1/topics", `{"name":"orders-eu","partitions":2}`,
		map[string]string{"Authorization": "Bearer " + n.tokens["ops"]})
	if status != 201 {
		t.Fatalf("create a topic over HTTP: %d %s", status, body)
	}
	producers := orderlogpb.NewProducerClient(n.conn)
	for range 2 {
		if _, err := producers.InitProducer(n.as("app"), &orderlogpb.InitProducerRequest{Name: "billing"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range [][]string{
		{"msg=audit", "principal=root", `action="token created"`, "for=ops"},
		{"msg=audit", "principal=root", `action="ACL added"`, "for=ops", "topic=orders*", "operation=admin"},
		{"msg=audit", "principal=ops", `action="topic created"`, "topic=orders ", "partitions=4"},
		{"msg=audit", "principal=ops", `action="topic created"`, "topic=orders-eu ", "partitions=2"},
		{"msg=audit", "principal=app", `action="producer fenced"`, "producer=billing", "fenced_epoch=1", "epoch=2"},
	} {
		if got := n.logs.matching(want...); len(got) != 1 {
			t.Errorf("audit lines with %q: %q", want, got)
		}
	}
	for _, unwanted := range [][]string{{"msg=audit", "topic=payments"}, {"msg=audit", "fenced_epoch=0"}} {
		if got := n.logs.matching(unwanted...); len(got) != 0 {
			t.Errorf("audit lines with %q: %q", unwanted, got)
		}
	}
}
