package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// composeProject is what the tests read of compose.yaml.
type composeProject struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// composeNodes are the orderlog node services.
var composeNodes = []string{"n1", "n2", "n3"}

func TestComposeServices(t *testing.T) {
	p := readOneYAML[composeProject](t, composeFile)
	for _, name := range append(slices.Clone(composeNodes), "s3", "prometheus", "grafana") {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("compose.yaml has no service %s", name)
		}
	}
	stages := dockerfileStages(t)
	for _, name := range append(slices.Clone(composeNodes), "s3") {
		s, ok := p.Services[name]
		if !ok {
			continue
		}
		if s.Build == nil {
			t.Errorf("service %s is not built from the Dockerfile", name)
			continue
		}
		path, _ := filepath.Abs(filepath.Join(filepath.Dir(composeFile), s.Build.Context, s.Build.Dockerfile))
		if want, _ := filepath.Abs(dockerfile); path != want {
			t.Errorf("service %s builds from %s, want %s", name, path, want)
		}
		context, _ := filepath.Abs(filepath.Join(filepath.Dir(composeFile), s.Build.Context))
		if root, _ := filepath.Abs(".."); context != root {
			t.Errorf("service %s: build context %s, want the repository root (the Dockerfile copies go.mod)", name, s.Build.Context)
		}
		if !stages[s.Build.Target] {
			t.Errorf("service %s: the Dockerfile has no stage %q", name, s.Build.Target)
		}
	}
	for _, name := range composeNodes {
		if s := p.Services[name]; s.Build != nil && s.Build.Target != "orderlog" {
			t.Errorf("node %s is built from stage %q, want orderlog", name, s.Build.Target)
		}
	}
	if s := p.Services["s3"]; s.Build != nil && s.Build.Target != "versitygw" {
		t.Errorf("s3 is built from stage %q, want versitygw", s.Build.Target)
	}
	checkComposeVolumes(t, p)
}

// dockerfileStages returns the Dockerfile's stage names, and checks that
// it builds ./cmd/orderlog and pins versitygw as the Makefile does.
func dockerfileStages(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	stages := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?mi)^FROM\s+\S+\s+AS\s+(\S+)`).FindAllStringSubmatch(text, -1) {
		stages[m[1]] = true
	}
	if !regexp.MustCompile(`go build [^\n]*\./cmd/orderlog\b`).MatchString(text) {
		t.Errorf("%s does not go build ./cmd/orderlog", dockerfile)
	}
	mk, err := os.ReadFile(makefile)
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`versitygw/cmd/versitygw@(v[0-9.]+)`)
	inMake, inDocker := version.FindStringSubmatch(string(mk)), version.FindStringSubmatch(text)
	if inMake == nil || inDocker == nil || inMake[1] != inDocker[1] {
		t.Errorf("versitygw version: Makefile %v, Dockerfile %v; want the same", inMake, inDocker)
	}
	return stages
}

// checkComposeVolumes checks that named volumes are declared and that bind
// mounts name files that exist.
func checkComposeVolumes(t *testing.T, p composeProject) {
	t.Helper()
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			source, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(source, ".") || strings.HasPrefix(source, "/") {
				if _, err := os.Stat(filepath.Join(filepath.Dir(composeFile), source)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, source, err)
				}
			} else if _, ok := p.Volumes[source]; !ok {
				t.Errorf("service %s mounts volume %s, which compose.yaml does not declare", name, source)
			}
		}
	}
}

func TestComposeNodeFlags(t *testing.T) {
	known := nodeFlags(t)
	p := readOneYAML[composeProject](t, composeFile)
	var targets []string
	for _, name := range composeNodes {
		s := p.Services[name]
		if len(s.Command) == 0 || s.Command[0] != "node" {
			t.Errorf("service %s: command %v, want `node ...`", name, s.Command)
			continue
		}
		flags, err := commandFlags(known, s.Command[1:])
		if err != nil {
			t.Errorf("service %s: %v", name, err)
		}
		if flags["name"] != name {
			t.Errorf("service %s: --name %q, want the service name", name, flags["name"])
		}
		if host, _, _ := net.SplitHostPort(flags["grpc-advertise"]); host != name {
			t.Errorf("service %s: --grpc-advertise %q, want the service name as host", name, flags["grpc-advertise"])
		}
		checkInitialCluster(t, name, flags, func(member string) string { return member })
		_, httpPort, err := net.SplitHostPort(flags["http-addr"])
		if err != nil {
			t.Errorf("service %s: --http-addr %q: %v", name, flags["http-addr"], err)
		}
		targets = append(targets, name+":"+httpPort)
		if s.Healthcheck == nil || !slices.Contains(s.Healthcheck.Test, "http://127.0.0.1:"+httpPort+"/readyz") {
			t.Errorf("service %s: health check %v does not ask /readyz on the HTTP port %s", name, s.Healthcheck, httpPort)
		}
		checkComposeArchive(t, p, name, flags)
	}
	sort.Strings(targets)
	if got := scrapeTargets(t); !slices.Equal(got, targets) {
		t.Errorf("%s scrapes %v, want every node's HTTP address %v", prometheusConfig, got, targets)
	}
}

// checkInitialCluster checks --etcd-initial-cluster: every node once, at
// the host hostOf(member), on the peer port --etcd-listen-peer listens on.
func checkInitialCluster(t *testing.T, node string, flags map[string]string, hostOf func(member string) string) {
	t.Helper()
	_, peerPort, err := net.SplitHostPort(flags["etcd-listen-peer"])
	if err != nil {
		t.Errorf("node %s: --etcd-listen-peer %q: %v", node, flags["etcd-listen-peer"], err)
	}
	var members []string
	for _, m := range strings.Split(flags["etcd-initial-cluster"], ",") {
		name, rawURL, _ := strings.Cut(m, "=")
		members = append(members, name)
		u, err := url.Parse(rawURL)
		if err != nil || u.Scheme != "http" || u.Hostname() != hostOf(name) || u.Port() != peerPort {
			t.Errorf("node %s: initial cluster member %q: want http://%s:%s", node, m, hostOf(name), peerPort)
		}
	}
	if !slices.Contains(members, flags["name"]) {
		t.Errorf("node %s: --name %q is not in --etcd-initial-cluster %v", node, flags["name"], members)
	}
	if len(members) != 3 {
		t.Errorf("node %s: --etcd-initial-cluster lists %v, want 3 members", node, members)
	}
}

// checkComposeArchive checks that the node archives to the s3 service
// with the credentials versitygw was given.
func checkComposeArchive(t *testing.T, p composeProject, name string, flags map[string]string) {
	t.Helper()
	endpoint, err := url.Parse(flags["s3-endpoint"])
	if err != nil || endpoint.Hostname() != "s3" {
		t.Errorf("service %s: --s3-endpoint %q, want the s3 service", name, flags["s3-endpoint"])
	}
	archive, err := url.Parse(flags["archive"])
	if err != nil || archive.Scheme != "s3" {
		t.Errorf("service %s: --archive %q, want s3://BUCKET/PREFIX", name, flags["archive"])
		return
	}
	s3 := p.Services["s3"]
	if !strings.Contains(strings.Join(s3.Command, " "), "/"+archive.Host+" ") {
		t.Errorf("the s3 service does not make the bucket %s: %v", archive.Host, s3.Command)
	}
	env := p.Services[name].Environment
	if env["AWS_ACCESS_KEY_ID"] != s3.Environment["ROOT_ACCESS_KEY_ID"] ||
		env["AWS_SECRET_ACCESS_KEY"] != s3.Environment["ROOT_SECRET_ACCESS_KEY"] {
		t.Errorf("service %s: its AWS credentials are not the s3 service's root account", name)
	}
}

// scrapeTargets returns the targets prometheus.yml scrapes, sorted.
func scrapeTargets(t *testing.T) []string {
	t.Helper()
	type config struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	c := readOneYAML[config](t, prometheusConfig)
	if !slices.Contains(c.RuleFiles, filepath.Base(alertsFile)) {
		t.Errorf("%s does not load %s", prometheusConfig, filepath.Base(alertsFile))
	}
	var targets []string
	for _, sc := range c.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	sort.Strings(targets)
	return targets
}
