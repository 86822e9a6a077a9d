// Package deploy holds what it takes to run and watch orderlog as a service
// (README.md says how to use each):
//
//	compose/     a 3-node cluster with an S3-compatible server, Prometheus and
//	             Grafana, for one Docker host
//	k8s/         a StatefulSet with its Services, PodDisruptionBudget and settings
//	grafana/     the dashboard
//	prometheus/  the alert rules, their promtool unit tests, the compose scrape
//	             configuration
//
// It has no code of its own: the manifests are the deliverable. Its tests
// check them against the orderlog they deploy — every flag is one `orderlog
// node` accepts, every metric an expression names is one a running node
// exports, probes and selectors point where they must — and run promtool on
// the rules. Nothing here may be imported.
package deploy
