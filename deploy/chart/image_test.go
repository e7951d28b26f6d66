package chart

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// instruction is one line of a Dockerfile, its continuations joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, COPY, …
	args string
}

// stage is what follows one FROM.
type stage struct {
	from, name string
	body       []instruction
}

// dockerfile reads the repository's Dockerfile into its stages. It knows
// the instructions the file uses and refuses others, so that a new one is
// looked at here before it is trusted.
func dockerfile(t *testing.T) []stage {
	t.Helper()
	src, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	known := []string{"FROM", "ARG", "WORKDIR", "COPY", "RUN", "ENV", "USER", "VOLUME", "EXPOSE", "STOPSIGNAL", "ENTRYPOINT", "CMD"}
	var stages []stage
	var cur *instruction
	lines := strings.Split(string(src), "\n")
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd)}
			trimmed = args
		} else if strings.HasPrefix(trimmed, "#") {
			continue
		}
		text, more := strings.CutSuffix(trimmed, "\\")
		cur.args = strings.TrimSpace(cur.args + " " + strings.TrimSpace(text))
		if more {
			continue
		}
		in := *cur
		cur = nil
		if !slices.Contains(known, in.cmd) {
			t.Fatalf("Dockerfile:%d: %s is not an instruction this test knows", in.line, in.cmd)
		}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("Dockerfile:%d: FROM %s", in.line, in.args)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			t.Fatalf("Dockerfile:%d: %s before FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	if cur != nil {
		t.Fatalf("Dockerfile:%d: a continuation runs off the end", cur.line)
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return stages
}

// all returns the stage's instructions of one kind.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the last instruction of one kind, which is the one in force
// (ENTRYPOINT, CMD, USER, WORKDIR).
func (s stage) last(t *testing.T, cmd string) instruction {
	t.Helper()
	all := s.all(cmd)
	if len(all) == 0 {
		t.Fatalf("the final stage has no %s", cmd)
	}
	return all[len(all)-1]
}

// execForm reads a JSON array of strings (ENTRYPOINT ["…"]); a shell form
// would need a shell, which an image FROM scratch has not.
func (in instruction) execForm(t *testing.T) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(in.args), &out); err != nil || len(out) == 0 {
		t.Fatalf("Dockerfile:%d: %s %s is not in exec form (a JSON array)", in.line, in.cmd, in.args)
	}
	return out
}

// image is what the Dockerfile's final stage gives a container: its
// entrypoint, default arguments, environment and working directory.
type image struct {
	entrypoint, cmd, env []string
	workdir              string
}

func imageOf(t *testing.T) image {
	t.Helper()
	stages := dockerfile(t)
	final := stages[len(stages)-1]
	im := image{
		entrypoint: final.last(t, "ENTRYPOINT").execForm(t),
		cmd:        final.last(t, "CMD").execForm(t),
		workdir:    final.last(t, "WORKDIR").args,
	}
	for _, in := range final.all("ENV") {
		for _, kv := range strings.Fields(in.args) {
			if !strings.Contains(kv, "=") || strings.ContainsAny(kv, `"'$`) {
				t.Fatalf("Dockerfile:%d: ENV %s: only plain KEY=VALUE is read here", in.line, in.args)
			}
			im.env = append(im.env, kv)
		}
	}
	return im
}

// copiesFrom reads COPY --from=STAGE [--chown=…] SRC DST, by destination.
func copiesFrom(s stage) map[string]string {
	out := map[string]string{}
	for _, in := range s.all("COPY") {
		var from string
		var paths []string
		for _, f := range strings.Fields(in.args) {
			switch {
			case strings.HasPrefix(f, "--from="):
				from = strings.TrimPrefix(f, "--from=")
			case strings.HasPrefix(f, "--"):
			default:
				paths = append(paths, f)
			}
		}
		if from != "" && len(paths) == 2 {
			out[paths[1]] = from + ":" + paths[0]
		}
	}
	return out
}

var buildRunRE = regexp.MustCompile(`(?:^|&&\s*)((?:[A-Z_]+=\S+\s+)*)go build (.*?)(?:\s+&&|$)`)

// TestDockerfile checks the image the Dockerfile builds without a Docker
// engine: a static binary built with make release's flags, on an empty
// base with CA certificates, run as the non-root user the chart runs as.
func TestDockerfile(t *testing.T) {
	stages := dockerfile(t)
	final := stages[len(stages)-1]
	if final.from != "scratch" {
		t.Errorf("the final stage is FROM %s, want scratch", final.from)
	}
	var build *stage
	for i := range stages[:len(stages)-1] {
		if stages[i].name != "" {
			if build != nil {
				t.Fatalf("more than one build stage: %s and %s", build.name, stages[i].name)
			}
			build = &stages[i]
		}
	}
	if build == nil {
		t.Fatal("no named build stage")
	}

	// The binary: built once, with the flags make release uses.
	var builds []buildFlags
	for _, in := range build.all("RUN") {
		for _, m := range buildRunRE.FindAllStringSubmatch(in.args, -1) {
			builds = append(builds, parseBuild(t, m[1], m[2]))
		}
	}
	if len(builds) != 1 {
		t.Fatalf("%d go builds in the build stage, want 1", len(builds))
	}
	b := builds[0]
	if want := makeRelease(t); !b.same(want.buildFlags) {
		t.Errorf("the image's go build %+v differs from make release's %+v", b, want.buildFlags)
	}
	if b.pkg != "./cmd/interlock" || b.out == "" {
		t.Errorf("go build of %q into %q, want ./cmd/interlock", b.pkg, b.out)
	}
	args := build.all("ARG")
	if !slices.ContainsFunc(args, func(in instruction) bool { return strings.HasPrefix(in.args, "VERSION") }) {
		t.Error("the build stage takes no VERSION argument for main.version")
	}

	// The final stage: the binary, CA certificates, nothing else from the build.
	copies := copiesFrom(final)
	im := imageOf(t)
	if len(im.entrypoint) != 1 || copies[im.entrypoint[0]] != build.name+":"+b.out {
		t.Errorf("ENTRYPOINT %v is not the binary the build stage made (%s): copies %v", im.entrypoint, b.out, copies)
	}
	if src := copies["/etc/ssl/certs/ca-certificates.crt"]; !strings.HasPrefix(src, build.name+":/etc/ssl/certs/") {
		t.Errorf("no CA certificates copied from the build stage to /etc/ssl/certs/ca-certificates.crt: copies %v", copies)
	}
	for _, in := range final.all("RUN") {
		t.Errorf("Dockerfile:%d: RUN in the final stage: an image FROM scratch has no shell", in.line)
	}

	// Non-root, and the user the chart's pods run as.
	user := final.last(t, "USER").args
	uid, gid, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric non-root UID (there is no /etc/passwd to name one)", user)
	}
	chart, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vals struct {
		PodSecurityContext struct {
			RunAsUser  int `json:"runAsUser"`
			RunAsGroup int `json:"runAsGroup"`
		} `json:"podSecurityContext"`
	}
	if err := yaml.Unmarshal(chart, &vals); err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(vals.PodSecurityContext.RunAsUser) + ":" + strconv.Itoa(vals.PodSecurityContext.RunAsGroup); uid+":"+gid != want {
		t.Errorf("USER %s, but the chart runs pods as %s", user, want)
	}
	if im.workdir != "/var/lib/interlock" || !slices.Contains(im.cmd, "/var/lib/interlock") {
		t.Errorf("WORKDIR %s, CMD %v: want the data directory /var/lib/interlock", im.workdir, im.cmd)
	}
	if c := copies["/var/lib/interlock"]; c == "" {
		t.Error("the data directory is not made in the image (owned by the user, since the root is read-only in the chart)")
	}
}
