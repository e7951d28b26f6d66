package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/internal/testdb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// buildInterlock builds the gateway from the main module, as the image's
// build stage does, into a directory of the test's own.
func buildInterlock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "interlock")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/interlock")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/interlock: %v\n%s", err, out)
	}
	return bin
}

// pod is one pod of a rendered Deployment, run as a process on this host.
type pod struct {
	name string
	// ports maps each port the container declares, by number and by
	// name, to the port of this host that stands for it.
	ports map[string]int
	// log is the file the process writes its output to.
	log string
}

func (p *pod) base() string { return fmt.Sprintf("http://127.0.0.1:%d", p.ports["http"]) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var listenRE = regexp.MustCompile(`^--listen=([^:]*):(\d+)$`)

// start runs the rendered pod's one container as the kubelet would run it
// from the image the Dockerfile builds, with what the rendered manifest
// says and nothing else: the mounts of mount, the command line of
// commandLine and the environment of environ. The process is stopped as
// the kubelet stops a pod: SIGTERM, then SIGKILL once the pod's grace
// period is over.
func (r *rendered) start(t *testing.T, name, binary string, im image) *pod {
	t.Helper()
	c := r.container()
	root := t.TempDir()
	rewrite, hostPath := r.mount(t, root)
	p := &pod{name: name, ports: map[string]int{}, log: filepath.Join(root, "log")}
	for _, cp := range c.Ports {
		host := freePort(t)
		p.ports[strconv.Itoa(int(cp.ContainerPort))] = host
		if cp.Name != "" {
			p.ports[cp.Name] = host
		}
	}
	args := r.commandLine(t, im, p, rewrite)
	dir := c.WorkingDir
	if dir == "" {
		dir = im.workdir
	}
	log, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(binary, args...)
	cmd.Env, cmd.Dir = r.environ(t, im, root, hostPath["/tmp"], rewrite), rewrite(dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	grace := time.Duration(*r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s did not exit cleanly on SIGTERM: %v", name, err)
			}
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s still ran %s after SIGTERM", name, grace)
		}
		if t.Failed() {
			out, _ := os.ReadFile(p.log)
			t.Logf("%s: %s %s\n%s", name, binary, strings.Join(args, " "), out)
		}
	})
	return p
}

// mount makes each volume mount of the container a directory under the
// pod's own root: a ConfigMap's keys written as files (the mounted
// configuration), an emptyDir or a claim empty. A process cannot mount, so
// paths under a mount point, in the arguments, the environment, the working
// directory and the mounted files, are rewritten to its directory; rewrite
// does that, and hostPath gives each mount point's directory.
func (r *rendered) mount(t *testing.T, root string) (rewrite func(string) string, hostPath map[string]string) {
	t.Helper()
	mounts := slices.Clone(r.container().VolumeMounts)
	// The longest mount point first, so that a nested one wins.
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })
	var pairs []string
	hostPath = map[string]string{}
	for _, m := range mounts {
		host := filepath.Join(root, filepath.FromSlash(m.MountPath))
		if err := os.MkdirAll(host, 0o700); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, m.MountPath, host)
		hostPath[m.MountPath] = host
	}
	rewrite = strings.NewReplacer(pairs...).Replace
	for _, m := range mounts {
		v := r.volume(m.Name)
		switch {
		case v == nil:
			t.Fatalf("volume mount %s names no volume of the pod", m.Name)
		case v.ConfigMap != nil:
			cm, ok := r.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: ConfigMap %s is not rendered by the chart", m.Name, v.ConfigMap.Name)
			}
			for key, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(hostPath[m.MountPath], key), []byte(rewrite(data)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case v.EmptyDir != nil || v.PersistentVolumeClaim != nil:
			// Empty at first, as a new claim is.
		default:
			t.Fatalf("volume %s: only ConfigMaps, emptyDirs and claims are run here", m.Name)
		}
	}
	return rewrite, hostPath
}

// commandLine is the process's arguments: the container's command, else
// the image's ENTRYPOINT (whose binary is the one buildInterlock made),
// then the container's args, else the image's CMD. Beside the paths under
// mounts, one thing changes, and only so that three replicas can run on
// one host: --listen's 0.0.0.0 and the container's port become 127.0.0.1
// and the free port of this host that stands for it.
func (r *rendered) commandLine(t *testing.T, im image, p *pod, rewrite func(string) string) []string {
	t.Helper()
	c := r.container()
	argv := c.Command
	if len(argv) == 0 {
		argv = im.entrypoint
	}
	if argv[0] != im.entrypoint[0] {
		t.Fatalf("the container runs %s, not the image's binary %s", argv[0], im.entrypoint[0])
	}
	args := c.Args
	if args == nil {
		args = im.cmd
	}
	args = append(slices.Clone(argv[1:]), args...)
	listens := 0
	for i, a := range args {
		if m := listenRE.FindStringSubmatch(a); m != nil {
			host, ok := p.ports[m[2]]
			if !ok {
				t.Fatalf("%s: the gateway would listen on a port the container does not declare", a)
			}
			args[i] = fmt.Sprintf("--listen=127.0.0.1:%d", host)
			listens++
			continue
		}
		args[i] = rewrite(a)
	}
	if listens != 1 {
		t.Fatalf("args %v: want one --listen", args)
	}
	return args
}

// environ is the process's environment: the image's ENV and the
// container's env, each value resolved from the rendered Secret or
// ConfigMap it refers to (no Secret from outside the chart may be needed),
// with HOME in the pod's root and TMPDIR at the /tmp mount, which the
// process finds by the variable rather than by the mount.
func (r *rendered) environ(t *testing.T, im image, root, tmp string, rewrite func(string) string) []string {
	t.Helper()
	if ext := r.external(); len(ext) != 0 {
		t.Fatalf("the pod reads Secrets the chart does not make: %v", ext)
	}
	env := []string{"HOME=" + root}
	env = append(env, im.env...)
	for k, v := range r.env(t) {
		env = append(env, k+"="+rewrite(v))
	}
	if tmp != "" {
		env = append(env, "TMPDIR="+tmp)
	}
	return env
}

// probeURL is where the kubelet sends an HTTP probe of this pod.
func (p *pod) probeURL(t *testing.T, c *corev1.Container, probe *corev1.Probe) string {
	t.Helper()
	if probe == nil || probe.HTTPGet == nil {
		t.Fatal("the container has no HTTP probe here")
	}
	g := probe.HTTPGet
	if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		t.Fatalf("probe scheme %s", g.Scheme)
	}
	key := g.Port.StrVal
	if g.Port.Type == intstr.Int {
		key = strconv.Itoa(int(g.Port.IntVal))
	}
	port, ok := p.ports[key]
	if !ok {
		t.Fatalf("the probe's port %s is not one the container declares", g.Port.String())
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, g.Path)
}

// status is the HTTP status of a GET, 0 when nothing answered.
func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitProbes waits for the pod as the kubelet does: the startup probe
// first, then readiness; liveness must then hold.
func (p *pod) waitProbes(t *testing.T, c *corev1.Container) {
	t.Helper()
	startup, live, ready := p.probeURL(t, c, c.StartupProbe), p.probeURL(t, c, c.LivenessProbe), p.probeURL(t, c, c.ReadinessProbe)
	until := func(url string, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for status(url) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s did not answer 200 within %s", p.name, url, limit)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The startup probe's budget, capped: the gateway starts in seconds.
	s := c.StartupProbe
	until(startup, min(time.Duration(s.PeriodSeconds*s.FailureThreshold)*time.Second, 45*time.Second))
	until(ready, 30*time.Second)
	if got := status(live); got != http.StatusOK {
		t.Errorf("%s: liveness %s answered %d", p.name, live, got)
	}
	t.Logf("%s: startup %s, liveness %s, readiness %s answer 200", p.name, startup, live, ready)
}

// mcpClient speaks streamable HTTP as raw JSON-RPC POSTs.
type mcpClient struct {
	url, key          string
	session, protocol string
	id                int
}

// post sends a JSON body with an API key and more headers.
func post(t *testing.T, url, key string, body []byte, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (m *mcpClient) post(t *testing.T, msg map[string]any) *http.Response {
	t.Helper()
	body, _ := json.Marshal(msg)
	return post(t, m.url, m.key, body, map[string]string{
		"Accept":               "application/json, text/event-stream",
		"Mcp-Session-Id":       m.session,
		"MCP-Protocol-Version": m.protocol,
	})
}

// rpc sends a request and returns its result; an error answer fails.
func (m *mcpClient) rpc(t *testing.T, method string, params any) map[string]any {
	t.Helper()
	m.id++
	resp := m.post(t, map[string]any{"jsonrpc": "2.0", "id": m.id, "method": method, "params": params})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %d %s", method, resp.StatusCode, b)
	}
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		m.session = s
	}
	var msgs [][]byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				msgs = append(msgs, []byte(strings.TrimSpace(data)))
			}
		}
	} else {
		b, _ := io.ReadAll(resp.Body)
		msgs = append(msgs, b)
	}
	for _, raw := range msgs {
		var answer struct {
			ID     int             `json:"id"`
			Result map[string]any  `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(raw, &answer) != nil || answer.ID != m.id {
			continue
		}
		if answer.Error != nil {
			t.Fatalf("%s: %s", method, answer.Error)
		}
		return answer.Result
	}
	t.Fatalf("%s: no answer among %q", method, msgs)
	return nil
}

// connect initializes an MCP client of the gateway at base with key.
func connect(t *testing.T, base, key string) *mcpClient {
	t.Helper()
	m := &mcpClient{url: base + "/mcp", key: key}
	res := m.rpc(t, "initialize", map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "chart-run", "version": "1"},
	})
	m.protocol, _ = res["protocolVersion"].(string)
	resp := m.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: HTTP %d", resp.StatusCode)
	}
	return m
}

// toolResult is what tools/call answered: the gate's refusals carry their
// code in structuredContent.
type toolResult struct {
	isError    bool
	structured map[string]any
}

func (r toolResult) code() string { s, _ := r.structured["code"].(string); return s }

func (m *mcpClient) call(t *testing.T, tool string, args map[string]any) toolResult {
	t.Helper()
	res := m.rpc(t, "tools/call", map[string]any{"name": tool, "arguments": args})
	out := toolResult{}
	out.isError, _ = res["isError"].(bool)
	out.structured, _ = res["structuredContent"].(map[string]any)
	return out
}

// approve decides an approval over the REST face.
func approve(t *testing.T, base, id, key, body string) (int, map[string]any) {
	t.Helper()
	resp := post(t, base+"/v1/approvals/"+id+"/approve", key, []byte(body), nil)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// apiKey is a key the chart generated, from its rendered Secret.
func (r *rendered) apiKey(t *testing.T, name string) string {
	t.Helper()
	k, ok := r.secrets[fullname+"-api-keys"].Data[name]
	if !ok {
		t.Fatalf("no generated API key %s in the rendered Secret", name)
	}
	return string(k)
}

// TestRenderedDeploymentRuns renders the chart as TestChart does and runs
// what it rendered: each replica of the Deployment is an interlock process
// started with the container's command, arguments and environment and the
// mounted configuration (see start), on the real Redis and PostgreSQL of
// the test machine. It checks the probes, a gated call over streamable
// HTTP, and an approval requested, decided and run on three replicas.
func TestRenderedDeploymentRuns(t *testing.T) {
	binary := buildInterlock(t)
	im := imageOf(t)

	t.Run("defaults: one gateway on SQLite, dry run on", func(t *testing.T) {
		r := renderChecked(t, values(t, ""))
		p := r.start(t, "gateway", binary, im)
		p.waitProbes(t, r.container())
		m := connect(t, p.base(), r.apiKey(t, "admin"))
		if res := m.call(t, "list_customers", map[string]any{}); res.isError {
			t.Errorf("list_customers, read-only, did not run: %v", res.structured)
		}
		// The operator's key is off: even with __confirm nothing gated runs.
		if res := m.call(t, "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true}); !res.isError || res.code() != "DRY_RUN_PREVIEW" {
			t.Errorf("send_reminder under the chart's default dry run: %+v, want DRY_RUN_PREVIEW", res)
		}
	})

	t.Run("three gateways on Redis and PostgreSQL", func(t *testing.T) {
		vals := values(t, "run-three.yaml")
		// Each run its own schema and key prefix, as a --set would give them.
		store := vals["store"].(map[string]any)
		store["postgres"].(map[string]any)["url"] = testdb.Schema(t, "interlock_chart_")
		store["prefix"] = fmt.Sprintf("%s%d:", store["prefix"], time.Now().UnixNano())
		r := renderChecked(t, vals)
		replicas := int(*r.deployment.Spec.Replicas)
		if replicas != 3 {
			t.Fatalf("%d replicas rendered, want 3", replicas)
		}
		var pods []*pod
		for i := range replicas {
			pods = append(pods, r.start(t, fmt.Sprintf("replica %d", i), binary, im))
		}
		for _, p := range pods {
			p.waitProbes(t, r.container())
		}
		agent, finance := r.apiKey(t, "agent"), r.apiKey(t, "finance")

		// A gated call (flag) on one replica: held without the agent's key,
		// run with it.
		m := connect(t, pods[0].base(), agent)
		reminder := map[string]any{"customer_id": "acct_9931"}
		if res := m.call(t, "send_reminder", reminder); !res.isError || res.code() != "DRY_RUN_PREVIEW" {
			t.Errorf("send_reminder without __confirm: %+v, want DRY_RUN_PREVIEW", res)
		}
		reminder["__confirm"] = true
		if res := m.call(t, "send_reminder", reminder); res.isError || res.structured == nil {
			t.Errorf("send_reminder with __confirm did not run: %+v", res)
		}

		// An approval: asked on replica 0, decided over REST on replica 1,
		// run on replica 2, once.
		refund := map[string]any{"invoice_id": "inv_1001", "amount": 1100}
		res := m.call(t, "refund_invoice", refund)
		id, _ := res.structured["approval_id"].(string)
		if res.code() != "APPROVAL_PENDING" || id == "" {
			t.Fatalf("refund_invoice of 1100 on replica 0: %+v, want APPROVAL_PENDING", res)
		}
		if code, body := approve(t, pods[1].base(), id, agent, `{}`); code != http.StatusForbidden {
			t.Errorf("the caller approving their own call on replica 1: %d %v, want 403", code, body)
		}
		if code, body := approve(t, pods[1].base(), id, finance, `{"reason":"the invoice was paid twice"}`); code != http.StatusOK {
			t.Fatalf("approve on replica 1: %d %v", code, body)
		}
		third := connect(t, pods[2].base(), agent)
		if res := third.call(t, "refund_invoice", refund); res.isError || res.structured == nil {
			t.Fatalf("the approved refund on replica 2: %+v, want it run", res)
		} else {
			t.Logf("replica 2 ran the approved refund: %v", res.structured)
		}
		// The approval was spent: the same call asks anew.
		if res := m.call(t, "refund_invoice", refund); res.code() != "APPROVAL_PENDING" || res.structured["approval_id"] == id {
			t.Errorf("the same refund again on replica 0: %+v, want a new approval", res)
		}
	})
}
