package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"orderlog/internal/apierr"
)

// step is one request as a Confluent client (serializer, CLI, REST proxy)
// sends it, and the answer expected: status and either the exact JSON
// body or, with a leading "~", a fragment of it.
type step struct {
	method, path, body string
	status             int
	want               string
}

func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestHandlerSpeaksConfluentsCoreAPI(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/registry", Handler(newRegistry(t), AllowAll)))
	t.Cleanup(srv.Close)
	avroV1 := avroRecord(avroID)
	avroV2 := avroRecord(avroID + `,{"name":"name","type":"string","default":""}`)
	avroBad := avroRecord(avroID + `,{"name":"name","type":"string"}`)
	jsonV1 := jsonObject(false, `"id"`, jsonID)
	steps := []step{
		{"GET", "/", "", 200, `{}`},
		{"GET", "/subjects", "", 200, `[]`},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + quoted(avroV1) + `}`, 200, `{"id":1}`},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + quoted(avroV1) + `,"schemaType":"AVRO","references":[]}`, 200, `{"id":1}`},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + quoted(avroV2) + `}`, 200, `{"id":2}`},
		{"POST", "/subjects/events-value/versions", `{"schemaType":"JSON","schema":` + quoted(jsonV1) + `}`, 200, `{"id":3}`},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + quoted(avroRecord(avroID+`,{"name":"x","type":"long"}`)) + `}`, 409,
			`~{"error_code":409,"message":"not backward compatible with version 2`},
		{"POST", "/subjects/orders-value/versions", `{"schema":"{\"type\":\"record\"}"}`, 422, `~"error_code":42201`},
		{"POST", "/subjects/orders-value/versions", `{"schema":"\"int\"","schemaType":"PROTOBUF"}`, 422, `~"error_code":42201`},
		{"POST", "/subjects/orders-proto/versions", `{"schemaType":"PROTOBUF","schema":` + quoted(proto3("int64 id = 1;")) + `}`, 200, `{"id":4}`},
		{"POST", "/subjects/orders-value/versions", `{"schema":"\"int\"","references":[{"name":"a","subject":"b","version":1}]}`, 422, `~"error_code":42201`},
		{"POST", "/subjects/orders-value/versions", `{"schema":`, 400, `~"error_code":400`},
		{"GET", "/subjects", "", 200, `["events-value","orders-proto","orders-value"]`},
		{"GET", "/subjects/orders-proto/versions/latest", "", 200, `~"schemaType":"PROTOBUF"`},
		{"GET", "/subjects/orders-value/versions", "", 200, `[1,2]`},
		{"GET", "/subjects/orders-value/versions/latest", "", 200,
			`{"subject":"orders-value","id":2,"version":2,"schema":` + quoted(avroV2) + `}`},
		{"GET", "/subjects/orders-value/versions/-1", "", 200, `~"version":2`},
		{"GET", "/subjects/events-value/versions/1", "", 200,
			`{"subject":"events-value","id":3,"version":1,"schemaType":"JSON","schema":` + quoted(jsonV1) + `}`},
		{"GET", "/subjects/orders-value/versions/1/schema", "", 200, avroV1},
		{"GET", "/schemas/ids/1", "", 200, `{"schema":` + quoted(avroV1) + `}`},
		{"GET", "/schemas/ids/3", "", 200, `{"schemaType":"JSON","schema":` + quoted(jsonV1) + `}`},
		{"GET", "/schemas/types", "", 200, `["JSON","PROTOBUF","AVRO"]`},
		{"POST", "/subjects/orders-value", `{"schema":` + quoted(avroV1) + `}`, 200,
			`{"subject":"orders-value","id":1,"version":1,"schema":` + quoted(avroV1) + `}`},
		{"POST", "/subjects/orders-value", `{"schema":"\"string\""}`, 404, `~"error_code":40403`},
		{"GET", "/subjects/nope/versions", "", 404, `~"error_code":40401`},
		{"GET", "/subjects/nope/versions/latest", "", 404, `~"error_code":40401`},
		{"GET", "/subjects/orders-value/versions/7", "", 404, `~"error_code":40402`},
		{"GET", "/subjects/orders-value/versions/abc", "", 422, `~"error_code":42202`},
		{"GET", "/schemas/ids/99", "", 404, `~"error_code":40403`},
		{"POST", "/compatibility/subjects/orders-value/versions/latest", `{"schema":` + quoted(avroV2) + `}`, 200, `{"is_compatible":true}`},
		{"POST", "/compatibility/subjects/orders-value/versions/latest", `{"schema":` + quoted(avroBad) + `}`, 200, `{"is_compatible":true}`},
		{"POST", "/compatibility/subjects/orders-value/versions/1?verbose=true", `{"schema":` + quoted(avroRecord(`{"name":"id","type":"string"}`)) + `}`, 200,
			`~{"is_compatible":false,"messages":["not backward compatible with version 1`},
		{"POST", "/compatibility/subjects/orders-value/versions", `{"schema":` + quoted(avroV1) + `}`, 200, `{"is_compatible":true}`},
		{"POST", "/compatibility/subjects/nope/versions/latest", `{"schema":` + quoted(avroV1) + `}`, 404, `~"error_code":40401`},
		{"GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`},
		{"PUT", "/config", `{"compatibility":"FULL"}`, 200, `{"compatibility":"FULL"}`},
		{"GET", "/config", "", 200, `{"compatibilityLevel":"FULL"}`},
		{"PUT", "/config", `{"compatibility":"SIDEWAYS"}`, 422, `~"error_code":42203`},
		{"GET", "/config/orders-value", "", 404, `~"error_code":40408`},
		{"PUT", "/config/only-validated", `{"validation":"warn"}`, 200, `{"validation":"warn"}`},
		{"GET", "/config/only-validated", "", 200, `{"compatibilityLevel":"FULL","validation":"warn"}`},
		{"GET", "/config/orders-value?defaultToGlobal=true", "", 200, `{"compatibilityLevel":"FULL","validation":"none"}`},
		{"PUT", "/config/orders-value", `{"compatibility":"NONE"}`, 200, `{"compatibility":"NONE"}`},
		{"GET", "/config/orders-value", "", 200, `{"compatibilityLevel":"NONE","validation":"none"}`},
		{"PUT", "/config/orders-value", `{"validation":"STRICT"}`, 200, `{"validation":"strict"}`},
		{"PUT", "/config/orders-value", `{"validation":"maybe"}`, 422, `~want none, warn or strict`},
		{"PUT", "/config", `{"validation":"strict"}`, 422, `~per subject`},
		{"GET", "/config/orders-value", "", 200, `{"compatibilityLevel":"NONE","validation":"strict"}`},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + quoted(avroRecord(`{"name":"id","type":"string"}`)) + `}`, 200, `{"id":5}`},
		{"POST", "/subjects/team%2Forders/versions", `{"schema":"\"string\""}`, 200, `{"id":6}`},
		{"GET", "/subjects/team%2Forders/versions/1", "", 200, `~"subject":"team/orders"`},
	}
	for _, s := range steps {
		req, err := http.NewRequest(s.method, srv.URL+"/registry"+s.path, strings.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json")
		if s.body != "" {
			req.Header.Set("Content-Type", ContentType)
		}
		status, body, contentType := do(t, req)
		if status != s.status || !matches(body, s.want) {
			t.Fatalf("%s %s: %d %s\nwant %d %s", s.method, s.path, status, body, s.status, s.want)
		}
		if contentType != ContentType {
			t.Fatalf("%s %s: content type %q", s.method, s.path, contentType)
		}
	}
}

func do(t *testing.T, req *http.Request) (int, string, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get("Content-Type")
}

func matches(body, want string) bool {
	if fragment, ok := strings.CutPrefix(want, "~"); ok {
		return strings.Contains(body, fragment)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, []byte(body)) == nil && compact.String() == want {
		return true
	}
	return body == want
}

// The handler asks Authorize for each call with the subject from the
// parsed path; refusals are Confluent's 403 40301 and 401 40101.
func TestHandlerAuthorizesEachCallOnItsSubject(t *testing.T) {
	reg := newRegistry(t)
	mustRegister(t, reg, "mine", Avro, `"string"`)
	mustRegister(t, reg, "secret", Avro, `"int"`)
	authorize := func(ctx context.Context, access Access, subject string) error {
		switch {
		case subject == "anonymous":
			return apierr.New(apierr.Unauthenticated, "no credentials")
		case subject == "mine", subject == "theirs" && access == ReadAccess:
			return nil
		}
		return apierr.New(apierr.PermissionDenied, "not on %q", subject)
	}
	srv := httptest.NewServer(Handler(reg, authorize))
	t.Cleanup(srv.Close)
	steps := []step{
		{"GET", "/subjects", "", 200, `["mine"]`},
		{"GET", "/subjects/mine/versions/1", "", 200, `~"id":1`},
		{"GET", "/subjects/secret/versions/1", "", 403, `~"error_code":40301`},
		{"GET", "/subjects/secret/versions/1/schema", "", 403, `~"error_code":40301`},
		{"GET", "/subjects/secret/versions", "", 403, `~"error_code":40301`},
		{"GET", "/subjects/secret%2F..%2Fmine/versions", "", 403, `~"error_code":40301`},
		{"POST", "/subjects/secret", `{"schema":"\"int\""}`, 403, `~"error_code":40301`},
		{"POST", "/subjects/theirs/versions", `{"schema":"\"int\""}`, 403, `~"error_code":40301`},
		{"POST", "/subjects/mine/versions", `{"schema":"\"int\""}`, 409, `~"error_code":409`},
		{"POST", "/compatibility/subjects/secret/versions/latest", `{"schema":"\"int\""}`, 403, `~"error_code":40301`},
		{"GET", "/schemas/ids/1", "", 403, `~"error_code":40301`},
		{"GET", "/config", "", 403, `~"error_code":40301`},
		{"PUT", "/config", `{"compatibility":"NONE"}`, 403, `~"error_code":40301`},
		{"PUT", "/config/theirs", `{"compatibility":"NONE"}`, 403, `~"error_code":40301`},
		{"PUT", "/config/mine", `{"compatibility":"NONE"}`, 200, `{"compatibility":"NONE"}`},
		{"GET", "/subjects/anonymous/versions", "", 401, `~"error_code":40101`},
	}
	for _, s := range steps {
		req, err := http.NewRequest(s.method, srv.URL+s.path, strings.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, req); status != s.status || !matches(body, s.want) {
			t.Fatalf("%s %s: %d %s\nwant %d %s", s.method, s.path, status, body, s.status, s.want)
		}
	}
}
