package node

import (
	"strings"
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
)

// TestSchemaRegistryIsServedUnderV1WithACLs: the registry answers at
// /v1/schemas/ with Confluent's media type; it needs credentials once
// authentication is on, admin on a subject's topic to register, read to
// read, and the operation on every topic for ids and the global level.
func TestSchemaRegistryIsServedUnderV1WithACLs(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	token := func(principal string, acls ...*orderlogpb.AclEntry) string {
		return tokenWithACLs(as(ctx, root), t, conn, principal, acls...)
	}
	alice := token("alice", &orderlogpb.AclEntry{Principal: "alice", Topic: "orders", Operation: "read"})
	bob := token("bob", &orderlogpb.AclEntry{Principal: "bob", Topic: "orders", Operation: "admin"})
	mallory := token("mallory")
	waitFor(t, 10*time.Second, "the tokens and ACLs, mallory's last", func() bool {
		code, _, _ := httpDo(t, "GET", "http://"+s.HTTPAddr()+"/v1/schemas/subjects/x/versions", "", map[string]string{"Authorization": "Bearer " + mallory})
		return code == 403
	})
	base := "http://" + s.HTTPAddr() + "/v1/schemas"
	schemaBody := `{"schema":"{\"type\":\"record\",\"name\":\"Order\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}`
	for _, h := range []struct {
		method, path, body, token string
		want                      int
		fragment                  string
	}{
		{"GET", "/subjects", "", "", 401, ""},
		{"POST", "/subjects/orders/versions", schemaBody, root, 200, `{"id":1}`},
		{"POST", "/subjects/secret/versions", `{"schema":"\"string\""}`, root, 200, `{"id":2}`},
		{"POST", "/subjects/orders/versions", schemaBody, alice, 403, `"error_code":40301`},
		{"GET", "/subjects/orders/versions/latest", "", alice, 200, `"subject":"orders","id":1,"version":1`},
		{"GET", "/subjects", "", alice, 200, `["orders"]`},
		{"GET", "/subjects/secret/versions", "", alice, 403, `"error_code":40301`},
		{"GET", "/subjects/orders/versions", "", mallory, 403, `"error_code":40301`},
		{"GET", "/schemas/ids/1", "", alice, 403, `"error_code":40301`},
		{"GET", "/schemas/ids/1", "", root, 200, `"schema":`},
		{"POST", "/subjects/orders/versions", schemaBody, bob, 200, `{"id":1}`},
		{"PUT", "/config/orders", `{"compatibility":"FULL"}`, bob, 200, `{"compatibility":"FULL"}`},
		{"PUT", "/config", `{"compatibility":"NONE"}`, bob, 403, `"error_code":40301`},
	} {
		header := map[string]string{"Content-Type": "application/vnd.schemaregistry.v1+json"}
		if h.token != "" {
			header["Authorization"] = "Bearer " + h.token
		}
		code, _, body := httpDo(t, h.method, base+h.path, h.body, header)
		if code != h.want || !strings.Contains(body, h.fragment) {
			t.Errorf("%s %s: %d %s, want %d with %s", h.method, h.path, code, body, h.want, h.fragment)
		}
	}
}
