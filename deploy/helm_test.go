package deploy_test

import (
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/waitroom"

// rendered is one chart rendering, each manifest decoded strictly into its typed object.
type rendered struct {
	notes           string
	deployment      *appsv1.Deployment
	service         *corev1.Service
	metricsService  *corev1.Service // the metrics port's own ClusterIP Service (a Service not of type ClusterIP)
	secrets         []*corev1.Secret
	serviceAccount  *corev1.ServiceAccount
	pdb             *policyv1.PodDisruptionBudget
	hpa             *autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []*monitoringv1.ServiceMonitor
	configMaps      []*corev1.ConfigMap
	networkPolicy   *networkingv1.NetworkPolicy
	kinds           []string
}

// renderChart renders the chart as `helm template waitroom deploy/helm/waitroom --namespace shop
// --kube-version 1.30.0` does, with vals over values.yaml, in strict mode (a template that reads
// a value values.yaml does not define fails, as `helm lint --strict` would). It uses Helm's
// engine rather than its install action, which would compile in the Kubernetes client too.
func renderChart(t *testing.T, vals map[string]any) (*rendered, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	require.NoError(t, err)
	require.NoError(t, chrt.Validate())
	const kubeVersion = "1.30.0"
	require.True(t, chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, kubeVersion), "kubeVersion %s", chrt.Metadata.KubeVersion)
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	caps.KubeVersion = *kv
	top, err := chartutil.ToRenderValues(chrt, vals,
		chartutil.ReleaseOptions{Name: "waitroom", Namespace: "shop", Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	manifest := ""
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if path.Ext(name) == ".yaml" {
			manifest += "\n---\n# Source: " + name + "\n" + files[name]
		}
	}
	r := &rendered{notes: files[chrt.Name()+"/templates/NOTES.txt"]}
	require.NotEmpty(t, r.notes)
	for name, doc := range releaseutil.SplitManifests(manifest) {
		var head struct{ APIVersion, Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &head), name)
		if head.Kind == "" {
			continue // a template that rendered nothing
		}
		r.kinds = append(r.kinds, head.APIVersion+"/"+head.Kind)
		switch head.APIVersion + "/" + head.Kind {
		case "apps/v1/Deployment":
			require.Nil(t, r.deployment, "a second Deployment")
			r.deployment = decodeStrict[appsv1.Deployment](t, doc)
		case "v1/Service":
			svc := decodeStrict[corev1.Service](t, doc)
			if strings.HasSuffix(svc.Name, "-metrics") {
				r.metricsService = svc
			} else {
				r.service = svc
			}
		case "v1/Secret":
			r.secrets = append(r.secrets, decodeStrict[corev1.Secret](t, doc))
		case "v1/ConfigMap":
			r.configMaps = append(r.configMaps, decodeStrict[corev1.ConfigMap](t, doc))
		case "v1/ServiceAccount":
			r.serviceAccount = decodeStrict[corev1.ServiceAccount](t, doc)
		case "policy/v1/PodDisruptionBudget":
			r.pdb = decodeStrict[policyv1.PodDisruptionBudget](t, doc)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			r.hpa = decodeStrict[autoscalingv2.HorizontalPodAutoscaler](t, doc)
		case "networking.k8s.io/v1/NetworkPolicy":
			require.Nil(t, r.networkPolicy, "a second NetworkPolicy")
			r.networkPolicy = decodeStrict[networkingv1.NetworkPolicy](t, doc)
		case "monitoring.coreos.com/v1/ServiceMonitor":
			r.serviceMonitors = append(r.serviceMonitors, decodeStrict[monitoringv1.ServiceMonitor](t, doc))
		default:
			t.Fatalf("%s: a kind this test does not validate: %s/%s", name, head.APIVersion, head.Kind)
		}
	}
	return r, nil
}

// decodeStrict decodes a manifest into T, failing on any field T does not have (a typo, a
// field at the wrong level) or a duplicate field.
func decodeStrict[T any](t *testing.T, doc string) *T {
	t.Helper()
	v := new(T)
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), v), "%s", doc)
	return v
}

// minimal is what an install must give: the store URLs and both keys.
func minimal() map[string]any {
	return map[string]any{
		"store": map[string]any{
			"redisURL":    "redis://redis.shop.svc:6379",
			"databaseURL": "postgres://waitroom:pw@postgres.shop.svc:5432/waitroom?sslmode=require",
		},
		"keys": map[string]any{"adminKey": "admin-secret-value", "tokenKey": "token-secret-value"},
	}
}

func TestHelmChartDefaultsRefuseMissingSettings(t *testing.T) {
	_, err := renderChart(t, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "keys.adminKey is required")

	vals := minimal()
	delete(vals["store"].(map[string]any), "databaseURL")
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "store.databaseURL is required")

	vals = minimal()
	vals["store"].(map[string]any)["databaseURL"] = "waitroom.db"
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "must be a PostgreSQL URL")
}

func TestHelmChartMinimal(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"apps/v1/Deployment", "v1/Service", "v1/Secret", "v1/ServiceAccount",
		"policy/v1/PodDisruptionBudget", "autoscaling/v2/HorizontalPodAutoscaler"}, r.kinds)
	checkWorkload(t, r)

	// The chart's Secret holds what was given, and the pods read it by reference only.
	require.Len(t, r.secrets, 1)
	sec := r.secrets[0]
	require.Equal(t, map[string]string{
		"admin-key": "admin-secret-value", "token-key": "token-secret-value",
		"redis-url": "redis://redis.shop.svc:6379", "database-url": "postgres://waitroom:pw@postgres.shop.svc:5432/waitroom?sslmode=require",
	}, sec.StringData)
	env := envOf(t, r.deployment)
	for name, key := range map[string]string{"WAITROOM_ADMIN_KEY": "admin-key", "WAITROOM_TOKEN_KEY": "token-key",
		"WAITROOM_REDIS_URL": "redis-url", "WAITROOM_DATABASE_URL": "database-url"} {
		ref := env[name].ValueFrom
		require.NotNil(t, ref, name)
		require.Equal(t, sec.Name, ref.SecretKeyRef.Name, name)
		require.Equal(t, key, ref.SecretKeyRef.Key, name)
	}
	require.Contains(t, r.deployment.Spec.Template.Annotations, "checksum/secret")
	require.Empty(t, r.serviceMonitors)
	require.Contains(t, r.notes, "kubectl -n shop port-forward svc/waitroom 8080:80")
}

func TestHelmChartExistingSecretsAndServiceMonitor(t *testing.T) {
	r, err := renderChart(t, map[string]any{
		"keys":           map[string]any{"existingSecret": "waitroom-keys", "adminKeySecretKey": "admin", "tokenKeySecretKey": "token"},
		"store":          map[string]any{"existingSecret": "waitroom-store"},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
		"autoscaling":    map[string]any{"enabled": false},
		"replicaCount":   4,
	})
	require.NoError(t, err)
	checkWorkload(t, r)
	require.Empty(t, r.secrets, "with both Secrets given, the chart creates none")
	require.NotContains(t, r.deployment.Spec.Template.Annotations, "checksum/secret")
	require.Nil(t, r.hpa)
	require.Equal(t, int32(4), *r.deployment.Spec.Replicas)
	env := envOf(t, r.deployment)
	for name, ref := range map[string][2]string{
		"WAITROOM_ADMIN_KEY": {"waitroom-keys", "admin"}, "WAITROOM_TOKEN_KEY": {"waitroom-keys", "token"},
		"WAITROOM_REDIS_URL": {"waitroom-store", "redis-url"}, "WAITROOM_DATABASE_URL": {"waitroom-store", "database-url"},
	} {
		require.Equal(t, ref[0], env[name].ValueFrom.SecretKeyRef.Name, name)
		require.Equal(t, ref[1], env[name].ValueFrom.SecretKeyRef.Key, name)
	}

	require.Len(t, r.serviceMonitors, 1)
	sm := r.serviceMonitors[0]
	require.Equal(t, "prom", sm.Labels["release"])
	require.Equal(t, r.service.Spec.Selector, sm.Spec.Selector.MatchLabels)
	require.Len(t, sm.Spec.Endpoints, 1)
	require.Equal(t, "metrics", sm.Spec.Endpoints[0].Port, "/metrics on http needs the admin key")
	require.Equal(t, ":9090", env["WAITROOM_METRICS_ADDR"].Value)
	require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	require.Contains(t, r.notes, "ServiceMonitor")
}

func TestHelmChartKeysSecretOnly(t *testing.T) {
	// Keys from the user's Secret, URLs from values: the chart's Secret holds only the URLs.
	vals := minimal()
	vals["keys"] = map[string]any{"existingSecret": "waitroom-keys"}
	vals["shutdown"] = map[string]any{"preStopSleepSeconds": 0}
	r, err := renderChart(t, vals)
	require.NoError(t, err)
	require.Len(t, r.secrets, 1)
	require.ElementsMatch(t, []string{"redis-url", "database-url"}, keysOf(r.secrets[0].StringData))
	env := envOf(t, r.deployment)
	require.Equal(t, "waitroom-keys", env["WAITROOM_ADMIN_KEY"].ValueFrom.SecretKeyRef.Name)
	require.Equal(t, r.secrets[0].Name, env["WAITROOM_REDIS_URL"].ValueFrom.SecretKeyRef.Name)
	require.Nil(t, r.deployment.Spec.Template.Spec.Containers[0].Lifecycle, "preStopSleepSeconds 0 has no preStop")
	require.Equal(t, (serveStopDefaults(t)).budget(), podStop(t, r.deployment).budget(), "without the sleep, the budget is serve's alone")
}

// checkWorkload asserts what every rendering must hold.
func checkWorkload(t *testing.T, r *rendered) {
	t.Helper()
	d := r.deployment
	require.NotNil(t, d)
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"serve"}, c.Args)

	// Probes: ready when started and not draining, not on the stores every pod shares (a shared
	// store's outage would take every pod out together), alive when HTTP answers, both on the
	// named port.
	require.Equal(t, "/readyz?exclude=database&exclude=redis", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Contains(t, []int{2, 3}, len(c.Ports), "http, metrics, and the gate's own with a gate listen")
	require.Equal(t, "http", c.Ports[0].Name)
	require.Equal(t, "metrics", c.Ports[1].Name)
	env := envOf(t, d)
	require.Equal(t, ":"+itoa(c.Ports[0].ContainerPort), env["WAITROOM_ADDR"].Value, "WAITROOM_ADDR listens on the container port")
	require.Equal(t, ":"+itoa(c.Ports[1].ContainerPort), env["WAITROOM_METRICS_ADDR"].Value, "WAITROOM_METRICS_ADDR listens on the metrics port")
	for name := range env {
		if name == "GOMEMLIMIT" { // the Go runtime's own
			continue
		}
		require.Contains(t, waitroomEnv(t), name, "the chart sets an env var waitroom does not read")
	}

	// Secrets by reference, never inline.
	for _, name := range []string{"WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY", "WAITROOM_REDIS_URL", "WAITROOM_DATABASE_URL"} {
		require.Empty(t, env[name].Value, name)
		require.NotNil(t, env[name].ValueFrom, name)
		require.NotNil(t, env[name].ValueFrom.SecretKeyRef, name)
	}

	// Non-root, read-only, no capabilities.
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotZero(t, *pod.SecurityContext.RunAsUser)
	require.True(t, *c.SecurityContext.RunAsNonRoot)
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	require.False(t, *pod.AutomountServiceAccountToken)

	// The grace period is the stop's budget: preStop sleep, then serve's drain and grace as
	// the pod sets them, and the margin (budget_test.go).
	stop := podStop(t, d)
	require.Equal(t, stop.budget(), time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second,
		"terminationGracePeriodSeconds for %+v", stop)
	require.NotNil(t, c.Resources.Requests.Cpu(), "the HPA's utilisation needs a CPU request")
	require.False(t, c.Resources.Requests.Cpu().IsZero())

	// The Service and the PDB select exactly the pods.
	require.Equal(t, d.Spec.Selector.MatchLabels, r.service.Spec.Selector)
	for k, v := range d.Spec.Selector.MatchLabels {
		require.Equal(t, v, d.Spec.Template.Labels[k])
	}
	require.Equal(t, "http", r.service.Spec.Ports[0].TargetPort.String())
	require.NotNil(t, r.pdb, "a PodDisruptionBudget")
	require.Equal(t, d.Spec.Selector.MatchLabels, r.pdb.Spec.Selector.MatchLabels)
	require.NotNil(t, r.serviceAccount)
	require.Equal(t, r.serviceAccount.Name, pod.ServiceAccountName)

	if r.hpa != nil {
		require.Nil(t, d.Spec.Replicas, "with an HPA the Deployment leaves replicas to it")
		require.Equal(t, "Deployment", r.hpa.Spec.ScaleTargetRef.Kind)
		require.Equal(t, d.Name, r.hpa.Spec.ScaleTargetRef.Name)
		require.Len(t, r.hpa.Spec.Metrics, 1)
		m := r.hpa.Spec.Metrics[0]
		require.Equal(t, autoscalingv2.ResourceMetricSourceType, m.Type)
		require.Equal(t, corev1.ResourceCPU, m.Resource.Name)
		require.Equal(t, autoscalingv2.UtilizationMetricType, m.Resource.Target.Type)
		require.GreaterOrEqual(t, *r.hpa.Spec.MinReplicas, int32(2))
	}
}

func envOf(t *testing.T, d *appsv1.Deployment) map[string]corev1.EnvVar {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		require.NotContains(t, env, e.Name, "env %s set twice", e.Name)
		env[e.Name] = e
	}
	return env
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestHelmChartValuesSchema(t *testing.T) {
	// A misspelt value would otherwise be ignored without a word (the ServiceMonitor not made).
	vals := minimal()
	vals["serviceMonitor"] = map[string]any{"enable": true}
	_, err := renderChart(t, vals)
	require.ErrorContains(t, err, "enable")

	vals = minimal()
	vals["replicaCount"] = "three"
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "replicaCount")
}

// podStop returns what the pod gives a stop: its preStop sleep, and the drain and grace its
// environment sets (serve's defaults where it sets none).
func podStop(t *testing.T, d *appsv1.Deployment) stopTimes {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	var s stopTimes
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		require.NotNil(t, c.Lifecycle.PreStop.Sleep, "no shell in the image: only the sleep action works")
		s.preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	env := map[string]string{}
	for name, e := range envOf(t, d) {
		env[name] = e.Value
	}
	def := serveStopDefaults(t)
	s.drain = envDuration(t, env, "WAITROOM_DRAIN", def.drain)
	s.grace = envDuration(t, env, "WAITROOM_SHUTDOWN_GRACE", def.grace)
	return s
}

// TestHelmChartStopBudget: the chart's defaults are serve's, so that its pods stop as the
// binary's help says, and the grace period follows any change of the parts.
func TestHelmChartStopBudget(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	env := envOf(t, r.deployment)
	def := serveStopDefaults(t)
	require.Equal(t, def.drain.String(), env["WAITROOM_DRAIN"].Value, "shutdown.drainSeconds is serve's --drain default")
	require.Equal(t, def.grace.String(), env["WAITROOM_SHUTDOWN_GRACE"].Value, "shutdown.graceSeconds is serve's --shutdown-grace default")
	stop := podStop(t, r.deployment)
	require.Equal(t, 5*time.Second, stop.preStop)
	t.Logf("default budget: %v preStop + %v drain + %v grace + %v = terminationGracePeriodSeconds %d",
		stop.preStop, stop.drain, stop.grace, stopMargin, *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds)

	vals := minimal()
	vals["shutdown"] = map[string]any{"preStopSleepSeconds": 10, "drainSeconds": 0, "graceSeconds": 60}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	checkWorkload(t, r)
	require.Equal(t, stopTimes{preStop: 10 * time.Second, grace: time.Minute}, podStop(t, r.deployment))
	require.Equal(t, int64(75), *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds)

	// The parts are set in one place: extraEnv may not set them behind the budget's back.
	vals = minimal()
	vals["extraEnv"] = []any{map[string]any{"name": "WAITROOM_SHUTDOWN_GRACE", "value": "90s"}}
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "shutdown.graceSeconds")
	vals = minimal()
	vals["terminationGracePeriodSeconds"] = 30
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "terminationGracePeriodSeconds", "the old value is refused, not ignored")
}

// TestHelmChartTrustedProxies: who a visitor is, for each setup values.yaml names. The default
// trusts the private ranges, which hold the common pod networks (an ingress controller's pods
// are the pods' peer) and no public address, behind a Service only the cluster reaches; the
// header is the one every controller writes, serve's default.
func TestHelmChartTrustedProxies(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	require.Equal(t, corev1.ServiceTypeClusterIP, r.service.Spec.Type, "the default trust assumes only the cluster reaches the pods")
	require.Nil(t, r.metricsService, "a ClusterIP Service carries the metrics port itself")
	require.True(t, slices.ContainsFunc(r.service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }))
	require.Empty(t, r.service.Spec.ExternalTrafficPolicy)
	env := envOf(t, r.deployment)
	require.Equal(t, serveDefaults(t)["client-ip-header"], env["WAITROOM_CLIENT_IP_HEADER"].Value)
	trusted := prefixes(t, env["WAITROOM_TRUSTED_PROXIES"].Value)
	require.NotEmpty(t, trusted, "behind an ingress controller, no trust makes the controller every visitor")
	cgnat := netip.MustParsePrefix("100.64.0.0/10")
	for _, p := range trusted {
		require.True(t, p.Addr().IsPrivate() || cgnat.Contains(p.Addr()) && p.Bits() >= cgnat.Bits(), "%s is not a private range", p)
	}
	for _, pods := range []string{
		"10.244.0.0/16",    // kubeadm's flannel, AKS kubenet
		"10.42.0.0/16",     // k3s, RKE2
		"192.168.0.0/16",   // Calico's default
		"10.8.0.0/14",      // a GKE VPC-native pod range
		"172.20.0.0/16",    // an EKS VPC
		"100.64.0.0/16",    // EKS custom networking's secondary CIDR
		"fd00:10:244::/56", // dual-stack kind
	} {
		p := netip.MustParsePrefix(pods)
		require.True(t, slices.ContainsFunc(trusted, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }),
			"the pod network %s is not trusted", p)
	}
	for _, visitor := range []string{"203.0.113.7", "8.8.8.8", "2001:db8::1", "35.191.0.1"} {
		a := netip.MustParseAddr(visitor)
		require.False(t, slices.ContainsFunc(trusted, func(q netip.Prefix) bool { return q.Contains(a) }), "a public address %s is trusted", a)
	}
	require.NotContains(t, r.notes, "WARNING")
	require.Contains(t, r.notes, "waitroom_untrusted_forwarded_requests_total")

	// GKE's global external Application Load Balancer: its front ends and its own address.
	vals := minimal()
	vals["trustedProxies"] = []any{"35.191.0.0/16", "130.211.0.0/22", "203.0.113.10/32"}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Equal(t, "35.191.0.0/16,130.211.0.0/22,203.0.113.10/32", envOf(t, r.deployment)["WAITROOM_TRUSTED_PROXIES"].Value)

	// An L4 load balancer straight to the Service: no proxy trusted, the visitor's address kept.
	vals = minimal()
	vals["trustedProxies"] = []any{}
	vals["service"] = map[string]any{"type": "LoadBalancer"}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	checkWorkload(t, r)
	require.Equal(t, "", envOf(t, r.deployment)["WAITROOM_TRUSTED_PROXIES"].Value)
	require.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, r.service.Spec.ExternalTrafficPolicy)
	require.NotContains(t, r.notes, "WARNING")
	// /metrics needs no key on its port: never on a Service the load balancer publishes.
	for _, p := range r.service.Spec.Ports {
		require.NotEqual(t, "metrics", p.Name, "the metrics port on a LoadBalancer Service")
	}
	require.NotNil(t, r.metricsService, "the metrics port's own Service")
	require.Equal(t, corev1.ServiceTypeClusterIP, r.metricsService.Spec.Type)
	require.Equal(t, "metrics", r.metricsService.Spec.Ports[0].Name)
	// The same with the private ranges still trusted is said at install.
	delete(vals, "trustedProxies")
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Contains(t, r.notes, "WARNING: service.type LoadBalancer")

	// Set in one place, with a header serve reads.
	vals = minimal()
	vals["extraEnv"] = []any{map[string]any{"name": "WAITROOM_TRUSTED_PROXIES", "value": "0.0.0.0/0"}}
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "trustedProxies")
	vals = minimal()
	vals["clientIPHeader"] = "X-Real-IP"
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "clientIPHeader")
	vals["clientIPHeader"] = "Forwarded"
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Equal(t, "Forwarded", envOf(t, r.deployment)["WAITROOM_CLIENT_IP_HEADER"].Value)
}

// prefixes parses WAITROOM_TRUSTED_PROXIES as serve does: comma-separated CIDRs or addresses.
func prefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			a, aerr := netip.ParseAddr(part)
			require.NoError(t, aerr, "%q is neither a CIDR nor an address", part)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p)
	}
	return out
}

// TestHelmChartGate (a new operator's finding: the chart could not run the gate): gate.file is
// mounted on every pod from a ConfigMap and named in WAITROOM_GATE; a file with listen gets its
// port on the pods and the Service; pods roll when the file changes; a listen without a port,
// and WAITROOM_GATE in extraEnv, are refused.
func TestHelmChartGate(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)

	// One port for both listeners: serve exits with code 2 (helper-78), so the chart refuses.
	same := minimal()
	same["metricsPort"] = 8080
	_, err = renderChart(t, same)
	require.ErrorContains(t, err, "containerPort and metricsPort are both 8080")

	require.Empty(t, r.configMaps)
	require.NotContains(t, envOf(t, r.deployment), "WAITROOM_GATE")
	require.Empty(t, r.deployment.Spec.Template.Spec.Volumes)

	file := "listen: \":8000\"\nsites:\n  - origin: http://shop.shop.svc:3000\n    protect:\n      - event: spring-sale\n        paths: [/checkout]\n"
	vals := minimal()
	vals["gate"] = map[string]any{"file": file}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Len(t, r.configMaps, 1)
	require.Equal(t, strings.TrimRight(file, "\n"), strings.TrimRight(r.configMaps[0].Data["gate.yaml"], "\n"))
	pod := r.deployment.Spec.Template.Spec
	require.Equal(t, "/etc/waitroom/gate.yaml", envOf(t, r.deployment)["WAITROOM_GATE"].Value)
	require.Len(t, pod.Volumes, 1)
	require.Equal(t, r.configMaps[0].Name, pod.Volumes[0].ConfigMap.Name)
	require.Equal(t, []corev1.VolumeMount{{Name: pod.Volumes[0].Name, MountPath: "/etc/waitroom", ReadOnly: true}},
		pod.Containers[0].VolumeMounts)
	ports := map[string]int32{}
	for _, p := range pod.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.Equal(t, int32(8000), ports["gate"])
	svc := map[string]string{}
	for _, p := range r.service.Spec.Ports {
		svc[p.Name] = p.TargetPort.String()
		if p.Name == "gate" {
			require.Equal(t, int32(8000), p.Port)
		}
	}
	require.Equal(t, "gate", svc["gate"])
	sum := r.deployment.Spec.Template.Annotations["checksum/gate"]
	require.NotEmpty(t, sum)
	checkWorkload(t, r)

	vals["gate"] = map[string]any{"file": strings.Replace(file, "/checkout", "/cart", 1)}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.NotEqual(t, sum, r.deployment.Spec.Template.Annotations["checksum/gate"], "a changed file rolls the pods")

	vals["gate"] = map[string]any{"file": "trusted_proxies: [10.0.0.0/8]\n"} // forward auth only
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	for _, p := range r.service.Spec.Ports {
		require.NotEqual(t, "gate", p.Name, "no listen: no gate port")
	}
	require.Equal(t, "/etc/waitroom/gate.yaml", envOf(t, r.deployment)["WAITROOM_GATE"].Value)

	for file, want := range map[string]string{
		"listen: localhost\n":                             "must take every address",
		"listen: 8000\n":                                  "must take every address",
		"listen: 127.0.0.1:8000\n":                        "must take every address",
		"listen: \":8080\"\n":                             "takes the http or metrics port",
		"listen: \":9090\"\n":                             "takes the http or metrics port",
		"listen: [\":8000\"\nsites:":                      "is not YAML",
		"listen: \":08080\"\n":                            "must take every address",
		"listen: \":0\"\n":                                "must take every address",
		"listen: \":99999\"\n":                            "no such port",
		"listen: \"127.0.0.1:8000\"\nlisten: \":8000\"\n": "given twice",
		"{\"listen\": \":8000\", \"listen\": \":8001\"}":  "given twice",
	} {
		vals["gate"] = map[string]any{"file": file}
		_, err = renderChart(t, vals)
		require.ErrorContains(t, err, want, file)
	}
	for _, file := range []string{"listen: \"0.0.0.0:8000\"\n", "listen: \"[::]:8000\"\n", "{\"listen\": \":8000\"}",
		"  # indented first line\nlisten: \":8000\"\n", "listen: \":8000\"\r\nsites: []\r\n"} {
		vals["gate"] = map[string]any{"file": file}
		r, err := renderChart(t, vals)
		require.NoError(t, err, file)
		require.Len(t, r.configMaps, 1, file)
		require.Equal(t, strings.TrimRight(strings.ReplaceAll(file, "\r\n", "\n"), "\n"),
			strings.TrimRight(r.configMaps[0].Data["gate.yaml"], "\n"), "the file as given: %q", file)
	}

	vals = minimal()
	vals["extraEnv"] = []any{map[string]any{"name": "WAITROOM_GATE", "value": "/x.yaml"}}
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "gate.file")
}

// Memory of a pod's connections: what values.yaml's arithmetic for maxConns uses.
const (
	// otherConnBytes is a connection that is not a push connection (a join, a poll, a page):
	// not measured; net/http's 4 KiB read and 4 KiB write buffers, a goroutine's stack and a
	// request in flight, rounded up.
	otherConnBytes = 32 << 10
	// baseBytes is the rest of the process: 22 MiB measured at start (docs/scaling.md,
	// ws/push), with room for the pools, caches and the gate.
	baseBytes = 64 << 20
	// reserveConns is connlimit.DefaultReserve, the connections kept for health checks.
	reserveConns = 64
	// pushMax is push.DefaultMaxConns, the push cap's ceiling.
	pushMax = 50_000
)

// pushCapOf is internal/app's pushCap: the push connections of an instance of maxConns.
func pushCapOf(maxConns int) int {
	left := max(maxConns/9, reserveConns+(maxConns+17)/18, reserveConns+1)
	return max(1, min(pushMax, maxConns-left))
}

// wsBytes is the measured RSS of one WebSocket in bytes: the fleet bench's median, as
// docs/scaling.md ("A fleet of WebSockets") reports it.
func wsBytes(t *testing.T) float64 {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "scaling.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`fleet: instance RSS per WebSocket\s+([0-9.]+) KiB`).FindSubmatch(doc)
	require.NotNil(t, m, "docs/scaling.md gives the fleet's RSS per WebSocket")
	kib, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return kib * 1024
}

// goMemLimitBytes parses GOMEMLIMIT as the Go runtime does (a number of bytes with an
// optional unit: B, KiB, MiB, GiB, TiB).
func goMemLimitBytes(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	require.NotNil(t, m, "GOMEMLIMIT %q", s)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n << map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
}

// TestHelmChartMemoryFitsConnections: a pod reaches its connection cap (503
// too_many_connections) before its memory limit (OOMKilled). With the chart's defaults, the
// connections WAITROOM_MAX_CONNS lets in, at the measured RSS of a WebSocket for the push cap's
// share and otherConnBytes for the rest, plus baseBytes, fit under GOMEMLIMIT, and GOMEMLIMIT
// is 80-95 % of the memory limit. Neither can be set behind the arithmetic's back in extraEnv.
func TestHelmChartMemoryFitsConnections(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	env := envOf(t, r.deployment)
	maxConns := atoi(t, env["WAITROOM_MAX_CONNS"].Value)
	soft := goMemLimitBytes(t, env["GOMEMLIMIT"].Value)
	limit := r.deployment.Spec.Template.Spec.Containers[0].Resources.Limits.Memory()
	require.False(t, limit.IsZero(), "a memory limit")
	// Requested as much as the limit: a pod sized to reach it in a crowd is not one a node
	// evicts first under memory pressure for having promised it less.
	require.True(t, limit.Equal(*r.deployment.Spec.Template.Spec.Containers[0].Resources.Requests.Memory()), "requests.memory below limits.memory")
	hard := limit.Value()
	require.GreaterOrEqual(t, float64(soft), 0.80*float64(hard), "GOMEMLIMIT well below the limit wastes it")
	require.LessOrEqual(t, float64(soft), 0.95*float64(hard), "GOMEMLIMIT leaves no room for what is not Go's heap")
	push := pushCapOf(maxConns)
	need := float64(push)*wsBytes(t) + float64(maxConns-push)*otherConnBytes + baseBytes
	t.Logf("%d connections (%d push): %.0f MiB, GOMEMLIMIT %d MiB, limit %d MiB", maxConns, push, need/(1<<20), soft>>20, hard>>20)
	require.LessOrEqual(t, need, float64(soft), "maxConns does not fit in goMemLimit")

	// serve's own default, the open-file limit less a tenth under containerd's 1,048,576
	// files, would not fit: this is why the chart sets the cap.
	def := pushCapOf(1048576 - 1048576/10)
	require.Greater(t, float64(def)*wsBytes(t)+baseBytes, float64(hard))

	for _, name := range []string{"WAITROOM_MAX_CONNS", "GOMEMLIMIT"} {
		vals := minimal()
		vals["extraEnv"] = []any{map[string]any{"name": name, "value": "1"}}
		_, err = renderChart(t, vals)
		require.ErrorContains(t, err, "maxConns / goMemLimit", name)
	}
	vals := minimal()
	vals["maxConns"] = 1000000
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Equal(t, "1000000", envOf(t, r.deployment)["WAITROOM_MAX_CONNS"].Value, "a large cap as an integer")
}

// TestHelmChartExtraEnvSetsNothingOfTheChart: every variable the chart sets is refused in
// extraEnv (a second entry of a name wins over the first: WAITROOM_ADDR would move the listener
// away from the probes and the Service, a store URL would stand in the pod spec unhidden).
func TestHelmChartExtraEnvSetsNothingOfTheChart(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	own := envOf(t, r.deployment)
	require.Contains(t, own, "WAITROOM_ADDR")
	for name := range own {
		vals := minimal()
		vals["extraEnv"] = []any{map[string]any{"name": name, "value": "x"}}
		_, err := renderChart(t, vals)
		require.Error(t, err, "extraEnv may set %s, which the chart sets", name)
		require.Regexp(t, `extraEnv: .*`+name, err.Error())
	}
	vals := minimal()
	vals["extraEnv"] = []any{map[string]any{"name": "WAITROOM_STORE_TIMEOUT", "value": "3s"}}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Equal(t, "3s", envOf(t, r.deployment)["WAITROOM_STORE_TIMEOUT"].Value)
}

// TestHelmChartNetworkPolicy: off by default; on, it selects the chart's pods and lets the
// given peers reach the http (and gate) port and the metrics port, by the container's port
// names, and nothing else.
func TestHelmChartNetworkPolicy(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	require.Nil(t, r.networkPolicy)

	vals := minimal()
	vals["networkPolicy"] = map[string]any{"enabled": true}
	vals["gate"] = map[string]any{"file": "listen: :8081\nsites:\n  - origin: http://shop\n"}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	np := r.networkPolicy
	require.NotNil(t, np)
	require.Equal(t, r.deployment.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels)
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	named := map[string]bool{}
	for _, p := range r.deployment.Spec.Template.Spec.Containers[0].Ports {
		named[p.Name] = true
	}
	var ports [][]string
	for _, rule := range np.Spec.Ingress {
		require.NotEmpty(t, rule.From, "a rule with no peers lets everyone in")
		var names []string
		for _, p := range rule.Ports {
			require.True(t, named[p.Port.StrVal], "port %v is none of the container's", p.Port)
			names = append(names, p.Port.StrVal)
		}
		ports = append(ports, names)
	}
	require.Equal(t, [][]string{{"http", "gate"}, {"metrics"}}, ports)
	require.Equal(t, "ingress-nginx", np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])

	// No peers for the metrics port: no rule for it (no one reaches it); none for http is refused.
	vals["networkPolicy"] = map[string]any{"enabled": true, "metricsFrom": []any{}}
	r, err = renderChart(t, vals)
	require.NoError(t, err)
	require.Len(t, r.networkPolicy.Spec.Ingress, 1)
	vals["networkPolicy"] = map[string]any{"enabled": true, "httpFrom": []any{}}
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "networkPolicy.httpFrom")
}

// TestHelmChartPostgresConnections: each pod's WAITROOM_DATABASE_MAX_CONNS is its share of
// store.databaseConnections among the most pods at once (the HPA's maxReplicas, or
// replicaCount, and the rollout's surge), so that all of them together never hold more; the
// defaults fit PostgreSQL's default max_connections (100, less its 3 superuser slots), and the
// notes give the numbers. A budget that leaves a pod fewer than serve's minimum
// (sqlstore.MinPostgresConns) is refused.
func TestHelmChartPostgresConnections(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "internal", "sqlstore", "sqlstore.go"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*MinPostgresConns\s*=\s*(\d+)\s*$`).FindSubmatch(src)
	require.NotNil(t, m, "sqlstore.MinPostgresConns")
	least := atoi(t, string(m[1]))
	for _, c := range []struct {
		autoscaling bool
		budget      int // store.databaseConnections; 0 = the default
		pods, each  int
	}{{true, 0, 12, 6}, {false, 0, 3, 22}, {true, 500, 12, 38}} {
		vals := minimal()
		vals["autoscaling"] = map[string]any{"enabled": c.autoscaling}
		budget := 90
		if c.budget != 0 {
			budget = c.budget
			vals["store"].(map[string]any)["databaseConnections"] = c.budget
		}
		r, err := renderChart(t, vals)
		require.NoError(t, err)
		if c.autoscaling {
			require.EqualValues(t, c.pods, r.hpa.Spec.MaxReplicas)
		} else {
			require.EqualValues(t, c.pods, *r.deployment.Spec.Replicas)
		}
		most := c.pods + r.deployment.Spec.Strategy.RollingUpdate.MaxSurge.IntValue()
		each := atoi(t, envOf(t, r.deployment)["WAITROOM_DATABASE_MAX_CONNS"].Value)
		require.Equal(t, c.each, each, "budget %d over %d pods", budget, most)
		require.LessOrEqual(t, most*each, budget, "all pods together within the budget")
		require.Greater(t, (most)*(each+1), budget, "each pod its whole share")
		require.GreaterOrEqual(t, each, least)
		if c.budget == 0 {
			require.LessOrEqual(t, most*each, 100-3, "the defaults within PostgreSQL's default max_connections")
		}
		require.Contains(t, r.notes, "each pod keeps up to "+itoa(each)+" connections open")
		require.Contains(t, r.notes, itoa(most)+" × "+itoa(each)+" = "+itoa(most*each)+".")
	}
	vals := minimal()
	vals["store"].(map[string]any)["databaseConnections"] = 25
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "store.databaseConnections 25 shared by 13 pods")
	vals["store"].(map[string]any)["databaseConnections"] = 1
	_, err = renderChart(t, vals)
	require.ErrorContains(t, err, "databaseConnections", "the schema's minimum")
}

// TestHelmChartProbesAnswer: the chart's probe paths, as rendered, are answered 200 by a real
// `waitroom serve` (the binary the Dockerfile builds): a probe path the binary refused (a
// misspelt check in ?exclude= is a 400) would keep every pod out of the Service.
func TestHelmChartProbesAnswer(t *testing.T) {
	r, err := renderChart(t, minimal())
	require.NoError(t, err)
	c := r.deployment.Spec.Template.Spec.Containers[0]
	base := startServe(t, dockerBinary(t))
	for _, path := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
	}
}
