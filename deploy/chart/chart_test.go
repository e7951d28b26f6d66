// Package chart tests the Helm chart in deploy/helm/interlock without a
// cluster: it lints the chart as `helm lint --strict` does and renders it
// as `helm template` does, over a matrix of values files; decodes every
// rendered object strictly into the Kubernetes API types; and hands the
// rendered configuration to interlock's own parser, with the environment
// the rendered Deployment gives the gateway.
package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/config"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../helm/interlock"
	release   = "gw"
	namespace = "tools"
	fullname  = "gw-interlock"
)

// serviceMonitor is the part of the Prometheus Operator's type the chart
// writes; decoding it strictly catches a misplaced field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			Authorization struct {
				Type        string                   `json:"type"`
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered holds the objects of one rendering, by kind.
type rendered struct {
	deployment     *appsv1.Deployment
	configMaps     map[string]*corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	services       []*corev1.Service
	claims         map[string]*corev1.PersistentVolumeClaim
	serviceAccount *corev1.ServiceAccount
	pdb            *policyv1.PodDisruptionBudget
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	networkPolicy  *networkingv1.NetworkPolicy
	serviceMonitor *serviceMonitor
}

func values(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render is helm template: the chart's values under vals, checked against
// values.schema.json, then every template.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits the rendered files into objects and decodes each strictly
// into its API type: an unknown or misplaced field is an error.
func decode(t *testing.T, files map[string]string) *rendered {
	t.Helper()
	r := &rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, claims: map[string]*corev1.PersistentVolumeClaim{}}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range docSep.Split(files[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var obj any
			want := ""
			switch tm.Kind {
			case "Deployment":
				r.deployment, obj, want = &appsv1.Deployment{}, &r.deployment, "apps/v1"
			case "ConfigMap":
				obj, want = new(corev1.ConfigMap), "v1"
			case "Secret":
				obj, want = new(corev1.Secret), "v1"
			case "Service":
				obj, want = new(corev1.Service), "v1"
			case "PersistentVolumeClaim":
				obj, want = new(corev1.PersistentVolumeClaim), "v1"
			case "ServiceAccount":
				r.serviceAccount, obj, want = &corev1.ServiceAccount{}, &r.serviceAccount, "v1"
			case "PodDisruptionBudget":
				r.pdb, obj, want = &policyv1.PodDisruptionBudget{}, &r.pdb, "policy/v1"
			case "HorizontalPodAutoscaler":
				r.hpa, obj, want = &autoscalingv2.HorizontalPodAutoscaler{}, &r.hpa, "autoscaling/v2"
			case "NetworkPolicy":
				r.networkPolicy, obj, want = &networkingv1.NetworkPolicy{}, &r.networkPolicy, "networking.k8s.io/v1"
			case "ServiceMonitor":
				r.serviceMonitor, obj, want = &serviceMonitor{}, &r.serviceMonitor, "monitoring.coreos.com/v1"
			default:
				t.Fatalf("%s: unexpected kind %q", name, tm.Kind)
			}
			if tm.APIVersion != want {
				t.Errorf("%s: %s is %s, want %s", name, tm.Kind, tm.APIVersion, want)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", name, tm.Kind, err, doc)
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				r.configMaps[o.Name] = o
			case *corev1.Secret:
				r.secrets[o.Name] = o
			case *corev1.Service:
				r.services = append(r.services, o)
			case *corev1.PersistentVolumeClaim:
				r.claims[o.Name] = o
			}
		}
	}
	if r.deployment == nil {
		t.Fatal("no Deployment rendered")
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// lintStrict is helm lint --strict: a warning fails as an error does.
func lintStrict(t *testing.T, vals map[string]any) {
	t.Helper()
	l := lint.AllWithKubeVersionAndSchemaValidation(chartDir, vals, namespace, nil, false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("lint: %s", m)
		}
	}
}

// placeholder stands for the value of a Secret made outside the chart.
func placeholder(name, key string) string { return "from-" + name + "-" + key }

// secretValue is what a secretKeyRef resolves to: the data of a Secret the
// chart made, else a placeholder that names the Secret and key.
func (r *rendered) secretValue(t *testing.T, ref *corev1.SecretKeySelector) string {
	t.Helper()
	if s, ok := r.secrets[ref.Name]; ok {
		v, ok := s.Data[ref.Key]
		if !ok {
			t.Fatalf("secretKeyRef %s/%s: the chart's Secret has no such key", ref.Name, ref.Key)
		}
		return string(v)
	}
	return placeholder(ref.Name, ref.Key)
}

// external lists the Secrets the pod reads that the chart does not make,
// as name/key.
func (r *rendered) external() []string {
	var out []string
	for _, e := range r.container().Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			if _, ok := r.secrets[e.ValueFrom.SecretKeyRef.Name]; !ok {
				out = append(out, e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r *rendered) container() *corev1.Container {
	return &r.deployment.Spec.Template.Spec.Containers[0]
}

// env is the gateway's environment as the rendered container sets it.
func (r *rendered) env(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range r.container().Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = r.secretValue(t, e.ValueFrom.SecretKeyRef)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			var v string
			cm, ok := r.configMaps[ref.Name]
			if ok {
				v, ok = cm.Data[ref.Key]
			}
			if !ok {
				t.Fatalf("env %s: configMapKeyRef %s/%s names no key of a rendered ConfigMap", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			t.Fatalf("env %s: only values, secretKeyRef and configMapKeyRef are expected", e.Name)
		}
	}
	return env
}

func (r *rendered) volume(name string) *corev1.Volume {
	for i, v := range r.deployment.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &r.deployment.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// arg returns the value of --name=value among the container's args.
func (r *rendered) arg(name string) (string, bool) {
	for _, a := range r.container().Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

// parseConfig gives the rendered interlock.yaml to interlock's parser, with
// the environment the Deployment sets (the gateway expands ${VAR} from it).
func (r *rendered) parseConfig(t *testing.T) *config.File {
	t.Helper()
	path, _ := r.arg("config")
	dir, key := filepath.Split(path)
	vol := r.volume("config")
	if dir != "/etc/interlock/" || vol == nil || vol.ConfigMap == nil {
		t.Fatalf("--config=%s is not in a ConfigMap volume at /etc/interlock", path)
	}
	cm, ok := r.configMaps[vol.ConfigMap.Name]
	if !ok {
		t.Fatalf("the config volume names ConfigMap %s, which the chart did not render", vol.ConfigMap.Name)
	}
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, key)
	}
	env := r.env(t)
	f, err := config.Parse(key, []byte(data), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("interlock refuses the rendered configuration: %v\n%s", err, data)
	}
	return f
}

var serveFlagRE = regexp.MustCompile(`fs\.(?:String|Bool|Int|Duration)(?:Var\([^,]+,\s*|\()"([a-z-]+)"`)

// serveFlags are the flags interlock serve defines, read from its source
// so that a renamed flag fails here rather than in a pod.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("../../cmd/interlock/serve.go")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, m := range serveFlagRE.FindAllStringSubmatch(string(src), -1) {
		flags[m[1]] = true
	}
	if !flags["config"] || !flags["listen"] {
		t.Fatalf("could not read serve's flags from its source: %v", flags)
	}
	return flags
}

// renderChecked renders and decodes the chart with vals, and checks what
// every rendering must give the gateway.
func renderChecked(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	files, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, files)
	checkPod(t, r)
	return r
}

// checkPod asserts what every rendering must give the gateway.
func checkPod(t *testing.T, r *rendered) {
	t.Helper()
	spec := r.deployment.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := r.container()

	// Non-root, read-only root filesystem, nothing to escalate to.
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("container: want readOnlyRootFilesystem")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("container: want allowPrivilegeEscalation false and every capability dropped")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it does not use")
	}
	// The gateway writes only to its data directory and /tmp, both volumes.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if r.volume(m.Name) == nil {
			t.Errorf("mount %s names no volume", m.Name)
		}
		mounts[m.MountPath] = m
	}
	for _, p := range []string{"/var/lib/interlock", "/tmp"} {
		if m, ok := mounts[p]; !ok || m.ReadOnly {
			t.Errorf("%s: want a writable volume", p)
		}
	}
	if data, _ := r.arg("data"); data != "/var/lib/interlock" {
		t.Errorf("--data=%s, want the data volume", data)
	}

	// Probes on the gateway's own endpoints, on the port it listens on.
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v: want GET %s on port http", p.what, p.probe, p.path)
		}
	}
	listen, _ := r.arg("listen")
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || listen != fmt.Sprintf("0.0.0.0:%d", c.Ports[0].ContainerPort) {
		t.Errorf("--listen=%s and ports %+v disagree", listen, c.Ports)
	}

	// The drain fits in the grace period: the preStop pause, then up to
	// 10 s for calls in flight, sessions, the last checkpoint.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("no preStop pause")
	}
	if grace := spec.TerminationGracePeriodSeconds; grace == nil || *grace < c.Lifecycle.PreStop.Sleep.Seconds+20 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least the preStop pause (%d s) + 20", grace, c.Lifecycle.PreStop.Sleep.Seconds)
	}

	// interlock serve, with flags it has.
	flags := serveFlags(t)
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %v: want serve", c.Args)
	}
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q is not a flag of interlock serve", a)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if v := env["MCP_DRY_RUN"].Value; v != "true" && v != "false" {
		t.Errorf("MCP_DRY_RUN=%q", v)
	}
	if s := env["INTERLOCK_SECRET"]; s.ValueFrom == nil || s.ValueFrom.SecretKeyRef == nil {
		t.Error("INTERLOCK_SECRET does not come from a Secret")
	} else if made, ok := r.secrets[s.ValueFrom.SecretKeyRef.Name]; ok && len(made.Data[s.ValueFrom.SecretKeyRef.Key]) < 32 {
		t.Errorf("the chart made an INTERLOCK_SECRET of %d characters", len(made.Data[s.ValueFrom.SecretKeyRef.Key]))
	}

	// What selects the pods selects these.
	labels := r.deployment.Spec.Template.Labels
	selects := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Errorf("%s selects every pod", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not carry", what, k, v)
			}
		}
	}
	selects("the Deployment", r.deployment.Spec.Selector.MatchLabels)
	for _, s := range r.services {
		selects("Service "+s.Name, s.Spec.Selector)
	}
	if r.pdb != nil {
		selects("the PodDisruptionBudget", r.pdb.Spec.Selector.MatchLabels)
	}
	if r.networkPolicy != nil {
		selects("the NetworkPolicy", r.networkPolicy.Spec.PodSelector.MatchLabels)
	}
	if r.serviceMonitor != nil {
		selects("the ServiceMonitor", r.serviceMonitor.Spec.Selector.MatchLabels)
	}
	if r.hpa != nil && r.hpa.Spec.ScaleTargetRef.Name != r.deployment.Name {
		t.Errorf("the HPA scales %s", r.hpa.Spec.ScaleTargetRef.Name)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// keyHashes are the SHA-256 of the keys in the chart's API key Secret, by
// the key's name.
func (r *rendered) keyHashes(t *testing.T) map[string]string {
	t.Helper()
	s, ok := r.secrets[fullname+"-api-keys"]
	if !ok {
		t.Fatal("no API key Secret rendered")
	}
	out := map[string]string{}
	for name, v := range s.Data {
		if len(v) < 32 {
			t.Errorf("generated key %s is %d characters", name, len(v))
		}
		out[name] = sha(string(v))
	}
	return out
}

func TestChart(t *testing.T) {
	tests := []struct {
		file string
		// replicas is the Deployment's count; 0 when an HPA sets it.
		replicas int32
		// claim is the data directory's claim; "" for an emptyDir.
		claim string
		// external are the Secrets (name/key) the pod reads that the
		// chart does not make.
		external []string
		check    func(t *testing.T, r *rendered, f *config.File)
	}{{
		file: "", replicas: 1, claim: fullname + "-data",
		check: func(t *testing.T, r *rendered, f *config.File) {
			if r.container().Env[0].Value != "true" {
				t.Error("the defaults run gated calls: want MCP_DRY_RUN=true")
			}
			if len(f.Upstreams) != 1 || f.Upstreams[0].Name != "demo" {
				t.Errorf("upstreams %+v: want the demo", f.Upstreams)
			}
		},
	}, {
		file: "one-sqlite.yaml", replicas: 1, claim: fullname + "-data",
		check: func(t *testing.T, r *rendered, f *config.File) {
			if r.deployment.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Error("one gateway on a ReadWriteOnce claim: want the Recreate strategy")
			}
			if f.Store.Redis != "" || f.Store.Postgres != "" || f.Audit.Postgres != "" {
				t.Errorf("store %+v, audit.postgres %q: want SQLite in the data directory", f.Store, f.Audit.Postgres)
			}
			if got := r.claims[fullname+"-data"].Spec.Resources.Requests.Storage().String(); got != "2Gi" {
				t.Errorf("claim of %s", got)
			}
			if u, _ := r.arg("public-url"); u != "https://interlock.example.com" {
				t.Errorf("--public-url=%s", u)
			}
			if r.container().Env[0].Value != "false" {
				t.Error("want MCP_DRY_RUN=false")
			}
			hashes := r.keyHashes(t)
			if len(f.Auth.Keys) != 1 || f.Auth.Keys[0].SHA256 != hashes["admin"] || f.Auth.Keys[0].Principal != "admin" {
				t.Errorf("auth keys %+v: want the hash of the generated admin key", f.Auth.Keys)
			}
			if r.hpa != nil || r.serviceMonitor != nil {
				t.Error("HPA or ServiceMonitor rendered without being asked for")
			}
			if r.pdb == nil || r.networkPolicy == nil {
				t.Error("want a PodDisruptionBudget and a NetworkPolicy")
			}
		},
	}, {
		file: "three-shared.yaml", replicas: 3,
		external: []string{"billing/token", "postgres/password", "redis/redis-password"},
		check: func(t *testing.T, r *rendered, f *config.File) {
			if r.deployment.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
				t.Error("three replicas on shared stores roll one by one: want RollingUpdate")
			}
			pg := "postgres://interlock:" + placeholder("postgres", "password") + "@postgres.data.svc:5432/interlock?sslmode=disable"
			if want := "redis://:" + placeholder("redis", "redis-password") + "@redis.data.svc:6379/0"; f.Store.Redis != want {
				t.Errorf("store.redis %q, want %q", f.Store.Redis, want)
			}
			if f.Store.Postgres != pg || f.Audit.Postgres != pg {
				t.Errorf("store.postgres %q, audit.postgres %q: want %q for both", f.Store.Postgres, f.Audit.Postgres, pg)
			}
			if f.Store.Prefix != "interlock:prod:" || f.Audit.AllowedCalls != "queued" {
				t.Errorf("prefix %q, allowed_calls %q", f.Store.Prefix, f.Audit.AllowedCalls)
			}
			if got := f.Upstreams[0].Headers["Authorization"]; got != "Bearer "+placeholder("billing", "token") {
				t.Errorf("upstream header %q: want the billing Secret's token", got)
			}
			if _, ok := r.arg("stateless"); !ok {
				t.Error("want --stateless")
			}
			hashes := r.keyHashes(t)
			byPrincipal := map[string]*config.Key{}
			for _, k := range f.Auth.Keys {
				byPrincipal[k.Principal] = k
			}
			if k := byPrincipal["prometheus"]; k == nil || k.SHA256 != hashes["metrics"] {
				t.Errorf("no key for the scraper matching the Secret's metrics key")
			}
			if k := byPrincipal["alice"]; k == nil || k.SHA256 != hashes["finance"] || !slices.Equal(k.Groups, []string{"finance"}) {
				t.Errorf("alice's key %+v", k)
			}
			sm := r.serviceMonitor
			if sm == nil || len(sm.Spec.Endpoints) != 1 {
				t.Fatal("want a ServiceMonitor with one endpoint")
			}
			ep := sm.Spec.Endpoints[0]
			if ep.Path != "/metrics" || ep.Port != "http" || ep.Authorization.Type != "Bearer" ||
				ep.Authorization.Credentials.Name != fullname+"-api-keys" || ep.Authorization.Credentials.Key != "metrics" {
				t.Errorf("ServiceMonitor endpoint %+v", ep)
			}
			if sm.Labels["release"] != "prometheus" {
				t.Errorf("ServiceMonitor labels %v", sm.Labels)
			}
			if v := r.volume("data"); v.EmptyDir == nil {
				t.Error("replicas share no claim: want an emptyDir data directory")
			}
			np := r.networkPolicy.Spec
			if len(np.Ingress) != 1 || len(np.Ingress[0].From) != 1 || np.Ingress[0].From[0].NamespaceSelector == nil {
				t.Errorf("NetworkPolicy ingress %+v: want the agents namespace only", np.Ingress)
			}
			if slices.Contains(np.PolicyTypes, networkingv1.PolicyTypeEgress) {
				t.Error("egress restricted without rules")
			}
			if *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds != 45 || r.container().Lifecycle.PreStop.Sleep.Seconds != 10 {
				t.Error("drain values not applied")
			}
			if len(r.deployment.Spec.Template.Spec.TopologySpreadConstraints) != 1 {
				t.Error("topologySpreadConstraints not applied")
			}
		},
	}, {
		file: "oauth.yaml", replicas: 1, claim: fullname + "-data",
		external: []string{"interlock-oidc/client-secret", "interlock-oidc/introspection-secret"},
		check: func(t *testing.T, r *rendered, f *config.File) {
			o := f.Auth.OAuth
			if len(f.Auth.Keys) != 0 || o == nil || o.Issuer != "https://login.example.com/realms/acme" {
				t.Fatalf("auth %+v: want the issuer and no keys", f.Auth)
			}
			if o.TokenProfile != "jwt" || !slices.Equal(o.Scopes, []string{"mcp:tools"}) || o.Claims.Principal != "email" || o.Claims.Groups != "groups" {
				t.Errorf("oauth %+v", o)
			}
			if o.Console == nil || o.Console.ClientID != "interlock-console" || o.Console.ClientSecret != placeholder("interlock-oidc", "client-secret") || !slices.Equal(o.Console.Scopes, []string{"groups"}) {
				t.Errorf("console %+v: want its client and the secret from interlock-oidc", o.Console)
			}
			if in := o.Introspection; in == nil || in.ClientID != "interlock-gateway" || in.ClientSecret != placeholder("interlock-oidc", "introspection-secret") || in.Cache != "15s" {
				t.Errorf("introspection %+v", o.Introspection)
			}
			if u, _ := r.arg("public-url"); u != "https://gw.example.com" {
				t.Errorf("--public-url=%s: the audience and the console's redirect depend on it", u)
			}
			if _, ok := r.secrets[fullname+"-api-keys"]; ok {
				t.Error("an API key Secret rendered with no generated keys")
			}
		},
	}, {
		file: "existing-secrets.yaml", replicas: 1, claim: "interlock-data",
		external: []string{"interlock-sealing/keys", "shared-redis/password"},
		check: func(t *testing.T, r *rendered, f *config.File) {
			if len(r.secrets) != 0 {
				t.Errorf("the chart made Secrets %v: every one exists", slices.Collect(func(y func(string) bool) {
					for n := range r.secrets {
						y(n)
					}
				}))
			}
			if len(r.claims) != 0 {
				t.Error("a claim rendered beside the existing one")
			}
			if want := "rediss://:" + placeholder("shared-redis", "password") + "@redis.data.svc:6380/1"; f.Store.Redis != want {
				t.Errorf("store.redis %q", f.Store.Redis)
			}
			if len(f.Auth.Keys) != 1 || f.Auth.Keys[0].Principal != "ci-bot" || f.Auth.Keys[0].Tenant != "acme" || f.Auth.Keys[0].SHA256 != sha("test") {
				t.Errorf("auth keys %+v", f.Auth.Keys)
			}
		},
	}, {
		file: "autoscaling.yaml", replicas: 0,
		check: func(t *testing.T, r *rendered, f *config.File) {
			h := r.hpa
			if h == nil || *h.Spec.MinReplicas != 2 || h.Spec.MaxReplicas != 6 {
				t.Fatalf("HPA %+v", h)
			}
			if f.Audit.Postgres != "postgres://audit@postgres.data.svc:5432/audit" || f.Store.Postgres != "" || f.Store.Redis == "" {
				t.Errorf("store %+v, audit.postgres %q", f.Store, f.Audit.Postgres)
			}
			if r.volume("data").EmptyDir == nil {
				t.Error("want an emptyDir data directory")
			}
		},
	}, {
		file: "own-config.yaml", replicas: 2,
		external: []string{"interlock-sealing/INTERLOCK_SECRET"},
	}}
	for _, tt := range tests {
		name := tt.file
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			vals := values(t, tt.file)
			lintStrict(t, vals)
			r := renderChecked(t, vals)
			spec := r.deployment.Spec
			switch {
			case tt.replicas == 0 && spec.Replicas != nil:
				t.Errorf("replicas %d beside an HPA", *spec.Replicas)
			case tt.replicas != 0 && (spec.Replicas == nil || *spec.Replicas != tt.replicas):
				t.Errorf("replicas %v, want %d", spec.Replicas, tt.replicas)
			}
			data := r.volume("data")
			switch {
			case tt.claim == "" && data.EmptyDir == nil:
				t.Errorf("data volume %+v: want an emptyDir", data)
			case tt.claim != "" && (data.PersistentVolumeClaim == nil || data.PersistentVolumeClaim.ClaimName != tt.claim):
				t.Errorf("data volume %+v: want claim %s", data, tt.claim)
			}
			if got := r.external(); !slices.Equal(got, tt.external) {
				t.Errorf("Secrets read from outside the chart: %v, want %v", got, tt.external)
			}
			if tt.file == "own-config.yaml" {
				if len(r.configMaps) != 0 || r.volume("config").ConfigMap.Name != "team-interlock" {
					t.Error("want the operator's ConfigMap, and none of the chart's")
				}
				return
			}
			f := r.parseConfig(t)
			if tt.check != nil {
				tt.check(t, r, f)
			}
		})
	}
}

// TestChartRefuses renders values the chart must refuse: more than one
// gateway without shared stores, and values of the wrong type or shape.
func TestChartRefuses(t *testing.T) {
	tests := []struct {
		name string
		vals string
		want string
	}{
		{"three replicas on SQLite", `replicaCount: 3`, "3 replicas need shared stores"},
		{"Redis without PostgreSQL", `{replicaCount: 2, store: {redis: {url: "redis://r:6379"}}}`, "2 replicas need shared stores"},
		{"PostgreSQL without Redis", `{replicaCount: 2, store: {postgres: {url: "postgres://p/db"}}}`, "2 replicas need shared stores"},
		{"autoscaling without stores", `{autoscaling: {enabled: true, maxReplicas: 4}}`, "4 replicas need shared stores"},
		{"own config, stores unsaid", `{replicaCount: 2, config: {existingConfigMap: mine}}`, "config.sharedStores=true"},
		{"no way to authenticate", `{auth: {generatedKeys: []}}`, "needs API keys"},
		{"console without issuer", `{auth: {oauth: {console: {clientID: c}}}}`, "set auth.oauth.issuer"},
		{"grace shorter than the drain", `{drain: {preStopSeconds: 5, terminationGracePeriodSeconds: 20}}`, "at least 25"},
		{"store in the free config", `{config: {interlock: {rules: [], store: {redis: "redis://r"}}}}`, "config.interlock.store"},
		{"replicas as a string", `replicaCount: "3"`, "replicaCount"},
		{"dryRun as a string", `{gateway: {dryRun: "no"}}`, "dryRun"},
		{"a misspelt value", `{replicas: 3}`, "replicas"},
		{"a key that is no hash", `{auth: {keys: [{sha256: abc, principal: p}]}}`, "sha256"},
		{"redis URL of another scheme", `{store: {redis: {url: "http://redis"}}}`, "url"},
		{"unknown log level", `{gateway: {logLevel: verbose}}`, "logLevel"},
		{"port out of range", `{service: {port: 70000}}`, "port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tt.vals))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(t, vals)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("rendered with %s: error %v, want one naming %q", tt.vals, err, tt.want)
			}
		})
	}
}

// TestDocumentedValues renders the values docs/deployment.md shows for the
// common cases, so that the page cannot drift from the chart.
func TestDocumentedValues(t *testing.T) {
	page, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## Kubernetes\n")
	if !ok {
		t.Fatal("docs/deployment.md has no Kubernetes section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 3 {
		t.Fatalf("%d yaml blocks in the Kubernetes section, want the three common cases", len(blocks))
	}
	for i, b := range blocks {
		t.Run(fmt.Sprint(i+1), func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(b[1]))
			if err != nil {
				t.Fatal(err)
			}
			lintStrict(t, vals)
			r := renderChecked(t, vals)
			r.parseConfig(t)
		})
	}
}
