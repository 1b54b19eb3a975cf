// Package deploy holds the deployment files of waitroom and, in its tests, the offline checks
// that keep them true to the code. It is a Go module of its own (deploy/go.mod), so that the
// checks' dependencies (Helm, the Kubernetes API types, BuildKit, compose-go, Prometheus's
// parser, the Prometheus Operator's types) stay out of the service module's graph; the tests
// read the repository's files and run the binary they build, and import none of its packages.
// `make test` runs them (scripts/test.sh), as does `go test ./...` in deploy/:
//
//	docker/Dockerfile         the image; parsed, its go build line run from the .dockerignore'd context
//	compose/compose.yaml      Redis + PostgreSQL + 3 instances + nginx; loaded and schema-checked
//	compose/nginx.conf        the load balancer of compose.yaml; upstreams checked against it
//	helm/waitroom             the Helm chart; rendered as `helm template` does, decoded strictly
//	grafana/waitroom.json     the dashboard; every metric it queries is scraped from `waitroom serve`
//	systemd/waitroom.service  the unit of the embedded deployment; `systemd-analyze verify`
//
// None of it is run here: no image is built, no container, cluster or unit started. See
// docs/deploy.md for how to use each file and what exactly was and was not checked.
package deploy
