package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The files the tests check, relative to this directory.
const (
	composeFile      = "compose/compose.yaml"
	dockerfile       = "compose/Dockerfile"
	k8sDir           = "k8s"
	dashboardFile    = "grafana/orderlog.json"
	alertsFile       = "prometheus/alerts.yaml"
	alertsTestFile   = "prometheus/alerts_test.yaml"
	prometheusConfig = "prometheus/prometheus.yml"
	operationsDoc    = "../docs/operations.md"
	makefile         = "../Makefile"
)

// binDir holds the orderlog binary the tests build (once, for the tests that
// ask for it).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "orderlog-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// nodeFlag is a flag `orderlog node` accepts; bool flags take no value
// argument.
type nodeFlag struct {
	name   string
	isBool bool
}

var nodeHelp struct {
	once  sync.Once
	flags map[string]nodeFlag
	err   error
}

// nodeFlags builds ./cmd/orderlog and returns the flags `orderlog node
// --help` lists.
func nodeFlags(t *testing.T) map[string]nodeFlag {
	t.Helper()
	nodeHelp.once.Do(func() {
		bin := filepath.Join(binDir, "orderlog")
		build := exec.Command("go", "build", "-o", bin, "orderlog/cmd/orderlog")
		if out, err := build.CombinedOutput(); err != nil {
			nodeHelp.err = fmt.Errorf("go build ./cmd/orderlog: %v\n%s", err, out)
			return
		}
		// The flag package prints the usage and exits 2 on --help.
		out, _ := exec.Command(bin, "node", "--help").CombinedOutput()
		nodeHelp.flags, nodeHelp.err = parseHelp(out)
	})
	if nodeHelp.err != nil {
		t.Fatal(nodeHelp.err)
	}
	return nodeHelp.flags
}

// helpFlag matches a flag line of the flag package's usage: "  -name" for a
// bool flag, "  -name type" otherwise.
var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)

func parseHelp(out []byte) (map[string]nodeFlag, error) {
	flags := map[string]nodeFlag{}
	for _, m := range helpFlag.FindAllSubmatch(out, -1) {
		flags[string(m[1])] = nodeFlag{name: string(m[1]), isBool: len(m[2]) == 0}
	}
	for _, want := range []string{"name", "data", "grpc-addr", "http-addr", "etcd-initial-cluster"} {
		if _, ok := flags[want]; !ok {
			return nil, fmt.Errorf("orderlog node --help lists no -%s; the output was:\n%s", want, out)
		}
	}
	return flags, nil
}

// commandFlags parses the arguments after `node` as the flag package
// would: "--name=value", "--name value", or a bool "--name". It returns
// each flag's value by name, and an error for an argument that is not a
// flag or a flag `orderlog node` does not accept.
func commandFlags(known map[string]nodeFlag, args []string) (map[string]string, error) {
	values := map[string]string{}
	var errs []error
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "-") {
			errs = append(errs, fmt.Errorf("argument %q is not a flag", arg))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		flag, ok := known[name]
		if !ok {
			errs = append(errs, fmt.Errorf("--%s: orderlog node does not accept this flag", name))
			continue
		}
		if !hasValue && !flag.isBool && i+1 < len(args) {
			i++
			value = args[i]
		}
		values[name] = value
	}
	return values, errors.Join(errs...)
}

// readYAML decodes every document of a YAML file into a new T each.
func readYAML[T any](t *testing.T, path string) []T {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []T
	for {
		var doc T
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// readOneYAML decodes a file holding one YAML document.
func readOneYAML[T any](t *testing.T, path string) T {
	t.Helper()
	docs := readYAML[T](t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", path, len(docs))
	}
	return docs[0]
}

func TestCommandFlags(t *testing.T) {
	known := map[string]nodeFlag{"name": {name: "name"}, "pprof": {name: "pprof", isBool: true}, "data": {name: "data"}}
	for name, c := range map[string]struct {
		args    []string
		want    map[string]string
		wantErr string
	}{
		"equals":        {args: []string{"--name=n1", "-data=/d"}, want: map[string]string{"name": "n1", "data": "/d"}},
		"separate":      {args: []string{"--name", "n1", "--pprof", "--data", "/d"}, want: map[string]string{"name": "n1", "pprof": "", "data": "/d"}},
		"unknown_flag":  {args: []string{"--tls-cert=/c"}, wantErr: "--tls-cert: orderlog node does not accept"},
		"stray_operand": {args: []string{"--pprof", "extra"}, wantErr: `"extra" is not a flag`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := commandFlags(known, c.args)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
