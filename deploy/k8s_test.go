package deploy

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// k8sObject is what the tests read of a Kubernetes manifest: the fields of
// the kinds in k8s/ they check, all in one struct.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data      map[string]string `yaml:"data"`      // ConfigMap
	Resources []string          `yaml:"resources"` // Kustomization
	Spec      struct {
		// Service
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Ports                    []k8sPort         `yaml:"ports"`
		ServiceSelector          map[string]string `yaml:"-"`
		// StatefulSet
		ServiceName          string         `yaml:"serviceName"`
		Replicas             int            `yaml:"replicas"`
		PodManagementPolicy  string         `yaml:"podManagementPolicy"`
		Template             k8sPodTemplate `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				AccessModes []string `yaml:"accessModes"`
				Resources   struct {
					Requests map[string]string `yaml:"requests"`
				} `yaml:"resources"`
			} `yaml:"spec"`
		} `yaml:"volumeClaimTemplates"`
		// StatefulSet and PodDisruptionBudget: matchLabels; Service: the labels.
		Selector       k8sSelector `yaml:"selector"`
		MaxUnavailable *int        `yaml:"maxUnavailable"`
	} `yaml:"spec"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	Port          int    `yaml:"port"`
	ContainerPort int    `yaml:"containerPort"`
	TargetPort    string `yaml:"targetPort"`
}

// k8sSelector decodes a Service's selector (a plain map) and a
// StatefulSet's or PDB's (matchLabels) alike.
type k8sSelector struct{ labels map[string]string }

func (s *k8sSelector) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]any
	if err := unmarshal(&m); err != nil {
		return err
	}
	if inner, ok := m["matchLabels"]; ok {
		m, _ = inner.(map[string]any)
	}
	s.labels = map[string]string{}
	for k, v := range m {
		s.labels[k] = fmt.Sprint(v)
	}
	return nil
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		Containers []k8sContainer `yaml:"containers"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name    string      `yaml:"name"`
	Image   string      `yaml:"image"`
	Args    []string    `yaml:"args"`
	Env     []k8sEnvVar `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	Ports          []k8sPort `yaml:"ports"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []k8sVolumeMount `yaml:"volumeMounts"`
}

type k8sEnvVar struct {
	Name      string `yaml:"name"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type k8sVolumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// k8sManifests reads every YAML file in k8s/, by kind.
func k8sManifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	byKind := map[string][]k8sObject{}
	for _, f := range files {
		for _, obj := range readYAML[k8sObject](t, f) {
			if obj.Kind == "" || obj.APIVersion == "" {
				t.Errorf("%s: a document without kind or apiVersion", f)
			}
			if obj.Kind == "Service" {
				obj.Spec.ServiceSelector = obj.Spec.Selector.labels
			}
			byKind[obj.Kind] = append(byKind[obj.Kind], obj)
		}
	}
	return byKind
}

// only returns the one object of a kind.
func only(t *testing.T, byKind map[string][]k8sObject, kind string) k8sObject {
	t.Helper()
	if len(byKind[kind]) != 1 {
		t.Fatalf("%s: %d objects of kind %s, want 1", k8sDir, len(byKind[kind]), kind)
	}
	return byKind[kind][0]
}

// selects says whether a selector's labels all appear in labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestK8sKustomizationListsEveryManifest(t *testing.T) {
	k := only(t, k8sManifests(t), "Kustomization")
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			want = append(want, base)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, want %v", got, want)
	}
}

func TestK8sStatefulSet(t *testing.T) {
	byKind := k8sManifests(t)
	sts := only(t, byKind, "StatefulSet")
	pod := sts.Spec.Template
	if !selects(sts.Spec.Selector.labels, pod.Metadata.Labels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods %v", sts.Spec.Selector.labels, pod.Metadata.Labels)
	}
	if sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("replicas %d, podManagementPolicy %q: want 3 started in parallel (etcd needs a quorum before any is ready)",
			sts.Spec.Replicas, sts.Spec.PodManagementPolicy)
	}
	checkServices(t, byKind["Service"], sts)
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	flags := checkK8sArgs(t, c, only(t, byKind, "ConfigMap"))
	checkProbes(t, c, flags["http-addr"])
	checkK8sInitialCluster(t, sts, flags)
	checkK8sVolumes(t, sts, c, flags["data"])
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Errorf("no memory limit")
	}
	if port := pod.Metadata.Annotations["prometheus.io/port"]; port != containerPort(t, c, "http") {
		t.Errorf("prometheus.io/port %q, want the HTTP port", port)
	}
}

// checkK8sArgs checks the container's args against `orderlog node` and
// that every $(VAR) they use is defined, and returns the flags' values.
func checkK8sArgs(t *testing.T, c k8sContainer, config k8sObject) map[string]string {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "node" {
		t.Fatalf("args %v, want `node ...`", c.Args)
	}
	flags, err := commandFlags(nodeFlags(t), c.Args[1:])
	if err != nil {
		t.Error(err)
	}
	defined := map[string]bool{}
	for _, e := range c.Env {
		defined[e.Name] = true
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == config.Metadata.Name {
			for k := range config.Data {
				defined[k] = true
			}
		}
	}
	for _, arg := range c.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(arg, -1) {
			if !defined[m[1]] {
				t.Errorf("%q uses $(%s), which neither env nor the ConfigMap %s defines", arg, m[1], config.Metadata.Name)
			}
		}
	}
	return flags
}

// containerPort returns the number of the container's named port.
func containerPort(t *testing.T, c k8sContainer, name string) string {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return strconv.Itoa(p.ContainerPort)
		}
	}
	t.Errorf("the container has no port named %s", name)
	return ""
}

// checkProbes: readiness on /readyz, liveness (and startup) on /healthz,
// all on the port --http-addr listens on.
func checkProbes(t *testing.T, c k8sContainer, httpAddr string) {
	t.Helper()
	_, httpPort, err := net.SplitHostPort(httpAddr)
	if err != nil {
		t.Errorf("--http-addr %q: %v", httpAddr, err)
	}
	for name, check := range map[string]struct {
		probe *k8sProbe
		path  string
	}{
		"readinessProbe": {c.ReadinessProbe, "/readyz"},
		"livenessProbe":  {c.LivenessProbe, "/healthz"},
		"startupProbe":   {c.StartupProbe, "/healthz"},
	} {
		if check.probe == nil || check.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s", name)
			continue
		}
		port := check.probe.HTTPGet.Port
		if _, err := strconv.Atoi(port); err != nil {
			port = containerPort(t, c, port)
		}
		if check.probe.HTTPGet.Path != check.path || port != httpPort {
			t.Errorf("%s asks %s on port %s, want %s on the HTTP port %s", name, check.probe.HTTPGet.Path, port, check.path, httpPort)
		}
	}
}

// checkServices: a headless Service (the StatefulSet's serviceName) that
// publishes pods before they are ready, and a client Service; both select
// the StatefulSet's pods, and their target ports are container ports.
func checkServices(t *testing.T, services []k8sObject, sts k8sObject) {
	t.Helper()
	pod := sts.Spec.Template
	var headless, client bool
	for _, s := range services {
		if !selects(s.Spec.ServiceSelector, pod.Metadata.Labels) {
			t.Errorf("Service %s does not select the StatefulSet's pods", s.Metadata.Name)
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(pod.Spec.Containers[0].Ports, func(cp k8sPort) bool { return cp.Name == p.TargetPort }) {
				t.Errorf("Service %s: target port %q is no container port", s.Metadata.Name, p.TargetPort)
			}
		}
		switch {
		case s.Metadata.Name == sts.Spec.ServiceName:
			headless = s.Spec.ClusterIP == "None" && s.Spec.PublishNotReadyAddresses
		case s.Spec.ClusterIP != "None":
			client = true
		}
	}
	if !headless {
		t.Errorf("no headless Service %s with publishNotReadyAddresses", sts.Spec.ServiceName)
	}
	if !client {
		t.Errorf("no client Service")
	}
}

// checkK8sInitialCluster: the members are the StatefulSet's pods, each at
// its headless Service name; the node's name is its pod's.
func checkK8sInitialCluster(t *testing.T, sts k8sObject, flags map[string]string) {
	t.Helper()
	var want []string
	for i := range sts.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d", sts.Metadata.Name, i))
	}
	var members []string
	for _, m := range strings.Split(flags["etcd-initial-cluster"], ",") {
		name, _, _ := strings.Cut(m, "=")
		members = append(members, name)
	}
	if !slices.Equal(members, want) {
		t.Errorf("--etcd-initial-cluster members %v, want the pods %v", members, want)
	}
	flags = maps.Clone(flags)
	flags["name"] = want[0] // $(POD_NAME) on the first pod
	checkInitialCluster(t, "k8s", flags, func(member string) string {
		return member + "." + sts.Spec.ServiceName + ".$(POD_NAMESPACE).svc"
	})
	if got := flags["grpc-advertise"]; !strings.HasPrefix(got, "$(POD_NAME)."+sts.Spec.ServiceName+".") {
		t.Errorf("--grpc-advertise %q, want the pod's name under the headless Service", got)
	}
	env := sts.Spec.Template.Spec.Containers[0].Env
	podName := slices.IndexFunc(env, func(e k8sEnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	})
	if podName < 0 || sts.Spec.Template.Spec.Containers[0].Args[1] != "--name=$(POD_NAME)" {
		t.Errorf("the node's --name is not its pod's name (POD_NAME from metadata.name)")
	}
}

// checkK8sVolumes: a volume claim template per pod, mounted at --data.
func checkK8sVolumes(t *testing.T, sts k8sObject, c k8sContainer, dataDir string) {
	t.Helper()
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1", len(sts.Spec.VolumeClaimTemplates))
	}
	claim := sts.Spec.VolumeClaimTemplates[0]
	if claim.Spec.Resources.Requests["storage"] == "" || !slices.Equal(claim.Spec.AccessModes, []string{"ReadWriteOnce"}) {
		t.Errorf("volume claim %s: want ReadWriteOnce and a storage request", claim.Metadata.Name)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m k8sVolumeMount) bool {
		return m.Name == claim.Metadata.Name && m.MountPath == dataDir
	}) {
		t.Errorf("volume claim %s is not mounted at --data %s", claim.Metadata.Name, dataDir)
	}
}

func TestK8sPodDisruptionBudget(t *testing.T) {
	byKind := k8sManifests(t)
	pdb := only(t, byKind, "PodDisruptionBudget")
	sts := only(t, byKind, "StatefulSet")
	if pdb.Spec.MaxUnavailable == nil {
		t.Errorf("no maxUnavailable, want 1")
	} else if *pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("maxUnavailable %d, want 1", *pdb.Spec.MaxUnavailable)
	}
	if !selects(pdb.Spec.Selector.labels, sts.Spec.Template.Metadata.Labels) {
		t.Errorf("the PDB's selector %v does not select the StatefulSet's pods %v", pdb.Spec.Selector.labels, sts.Spec.Template.Metadata.Labels)
	}
	if !maps.Equal(pdb.Spec.Selector.labels, sts.Spec.Selector.labels) {
		t.Errorf("the PDB selects %v, the StatefulSet %v: want the same pods", pdb.Spec.Selector.labels, sts.Spec.Selector.labels)
	}
}

func TestK8sConfigMapKeysAreUsed(t *testing.T) {
	config := only(t, k8sManifests(t), "ConfigMap")
	raw, err := os.ReadFile(filepath.Join(k8sDir, "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for key := range config.Data {
		if key == "GOMEMLIMIT" { // read by the Go runtime
			continue
		}
		if !strings.Contains(string(raw), "$("+key+")") {
			t.Errorf("ConfigMap key %s is used by no argument", key)
		}
	}
}
