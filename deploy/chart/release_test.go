package chart

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// buildFlags is what makes a release binary what it is: cgo off, paths
// trimmed, symbols stripped and the version stamped in.
type buildFlags struct {
	cgo      string
	trimpath bool
	// ldflags are the linker's flags with the version's value written
	// VERSION, however the file spells it ($(VERSION), ${VERSION},
	// {{ .Version }}).
	ldflags []string
	// pkg and out are the package built and the file written, where the
	// command line names them.
	pkg, out string
}

func (b buildFlags) same(o buildFlags) bool {
	return b.cgo == o.cgo && b.trimpath == o.trimpath && slices.Equal(b.ldflags, o.ldflags)
}

var (
	versionValueRE = regexp.MustCompile(`^(-X\s*main\.version=).+$`)
	templateRE     = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

// linkerFlags splits an -ldflags value and writes the version's value as
// VERSION.
func linkerFlags(s string) []string {
	var out []string
	// A template's action may hold spaces: {{ .Version }}.
	fields := strings.Fields(templateRE.ReplaceAllString(s, "TEMPLATE"))
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if f == "-X" && i+1 < len(fields) {
			i++
			f += " " + fields[i]
		}
		out = append(out, versionValueRE.ReplaceAllString(f, "${1}VERSION"))
	}
	return out
}

// words splits a shell command line into words, honouring double quotes,
// which is all that the Makefile and the Dockerfile use.
func words(s string) []string {
	var out []string
	var b strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// parseBuild reads `VAR=… go build ARGS` from its environment assignments
// and its arguments.
func parseBuild(t *testing.T, env, args string) buildFlags {
	t.Helper()
	var b buildFlags
	for _, kv := range strings.Fields(env) {
		if v, ok := strings.CutPrefix(kv, "CGO_ENABLED="); ok {
			b.cgo = v
		}
	}
	w := words(args)
	for i := 0; i < len(w); i++ {
		switch a := w[i]; {
		case a == "-trimpath":
			b.trimpath = true
		case a == "-ldflags" && i+1 < len(w):
			i++
			b.ldflags = linkerFlags(w[i])
		case strings.HasPrefix(a, "-ldflags="):
			b.ldflags = linkerFlags(strings.TrimPrefix(a, "-ldflags="))
		case a == "-o" && i+1 < len(w):
			i++
			b.out = w[i]
		case strings.HasPrefix(a, "-"):
			t.Fatalf("go build %s: flag %s is not one this test compares", args, a)
		default:
			b.pkg = a
		}
	}
	return b
}

// releaseRecipe is what make release builds and packs.
type releaseRecipe struct {
	buildFlags
	platforms []string
	// name is an archive's name with the version, OS and architecture
	// written {V}, {OS} and {ARCH}.
	name string
	// files are the files beside the binary in each archive.
	files []string
}

var (
	platformsRE   = regexp.MustCompile(`(?m)^PLATFORMS\s*=\s*(.+)$`)
	makeBuildRE   = regexp.MustCompile(`((?:[A-Z_]+=\S+\s+)+)go build (.*?)\s*\|\|`)
	makeArchiveRE = regexp.MustCompile(`name=(\S+);`)
	makeTarRE     = regexp.MustCompile(`tar -C \$\$dir -czf dist/\$\$name\.tar\.gz interlock (.*?) \|\|`)
)

// makeRelease reads the release target of the Makefile.
func makeRelease(t *testing.T) releaseRecipe {
	t.Helper()
	src, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, ok := strings.Cut(string(src), "\nrelease:\n")
	if !ok {
		t.Fatal("the Makefile has no release target")
	}
	var r releaseRecipe
	p := platformsRE.FindStringSubmatch(string(src))
	m := makeBuildRE.FindStringSubmatch(recipe)
	n := makeArchiveRE.FindStringSubmatch(recipe)
	tar := makeTarRE.FindStringSubmatch(recipe)
	if p == nil || m == nil || n == nil || tar == nil {
		t.Fatalf("cannot read the release target's platforms, go build, archive name or contents:\n%s", recipe)
	}
	r.platforms = strings.Fields(p[1])
	r.buildFlags = parseBuild(t, m[1], m[2])
	r.name = strings.NewReplacer("$(VERSION)", "{V}", "$$os", "{OS}", "$$arch", "{ARCH}").Replace(n[1])
	r.files = strings.Fields(tar[1])
	if !strings.Contains(recipe, "zip -q ../$$name.zip interlock$$ext "+tar[1]+")") {
		t.Errorf("the Windows archive holds other files than %s", tar[1])
	}
	return r
}

// target is a GoReleaser build's OS and architecture.
type target struct {
	Goos   string `json:"goos"`
	Goarch string `json:"goarch"`
}

// goreleaserConfig is the part of GoReleaser v2's configuration that
// .goreleaser.yaml uses; decoding strictly refuses any other key, so a
// misspelt or new one is looked at here.
type goreleaserConfig struct {
	Version     int    `json:"version"`
	ProjectName string `json:"project_name"`
	Builds      []struct {
		ID           string   `json:"id"`
		Main         string   `json:"main"`
		Binary       string   `json:"binary"`
		Env          []string `json:"env"`
		Flags        []string `json:"flags"`
		Ldflags      []string `json:"ldflags"`
		Goos         []string `json:"goos"`
		Goarch       []string `json:"goarch"`
		Ignore       []target `json:"ignore"`
		ModTimestamp string   `json:"mod_timestamp"`
	} `json:"builds"`
	Archives []struct {
		ID              string   `json:"id"`
		IDs             []string `json:"ids"`
		NameTemplate    string   `json:"name_template"`
		Formats         []string `json:"formats"`
		FormatOverrides []struct {
			Goos    string   `json:"goos"`
			Formats []string `json:"formats"`
		} `json:"format_overrides"`
		Files []string `json:"files"`
	} `json:"archives"`
	Checksum struct {
		NameTemplate string `json:"name_template"`
		Algorithm    string `json:"algorithm"`
	} `json:"checksum"`
	Release struct {
		Disable bool `json:"disable"`
	} `json:"release"`
	Snapshot struct {
		VersionTemplate string `json:"version_template"`
	} `json:"snapshot"`
}

// TestGoreleaser checks that .goreleaser.yaml builds and packs what make
// release does: the same platforms, build flags, archive names and
// contents, and SHA-256 checksums.
//
// It reads the file instead of running `goreleaser check`: GoReleaser v2
// built from the module proxy with go run took more than two minutes of
// downloads and compiling on two cores before it could say anything, too
// long for every run of make test.
func TestGoreleaser(t *testing.T) {
	src, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var g goreleaserConfig
	if err := yaml.UnmarshalStrict(src, &g); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	want := makeRelease(t)
	if g.Version != 2 || g.ProjectName != "interlock" || len(g.Builds) != 1 || len(g.Archives) != 1 {
		t.Fatalf("want version 2, project interlock, one build and one archive: %+v", g)
	}
	b, a := g.Builds[0], g.Archives[0]

	if b.Main != "./cmd/interlock" || b.Binary != "interlock" {
		t.Errorf("builds %s as %s, want ./cmd/interlock as interlock", b.Main, b.Binary)
	}
	var got []string
	for _, os := range b.Goos {
		for _, arch := range b.Goarch {
			if !slices.Contains(b.Ignore, target{os, arch}) {
				got = append(got, os+"/"+arch)
			}
		}
	}
	slices.Sort(got)
	platforms := slices.Sorted(slices.Values(want.platforms))
	if !slices.Equal(got, platforms) {
		t.Errorf("platforms %v, the Makefile's %v", got, platforms)
	}

	flags := buildFlags{ldflags: linkerFlags(strings.Join(b.Ldflags, " "))}
	for _, e := range b.Env {
		if v, ok := strings.CutPrefix(e, "CGO_ENABLED="); ok {
			flags.cgo = v
		}
	}
	for _, f := range b.Flags {
		if f != "-trimpath" {
			t.Errorf("build flag %s: make release has none but -trimpath", f)
		}
		flags.trimpath = true
	}
	if !flags.same(want.buildFlags) {
		t.Errorf("builds with %+v, make release with %+v", flags, want.buildFlags)
	}
	if want.cgo != "0" || !want.trimpath || !slices.Contains(want.ldflags, "-X main.version=VERSION") || !slices.Contains(want.ldflags, "-s") {
		t.Errorf("make release builds with %+v: want CGO_ENABLED=0, -trimpath, -s -w and main.version", want.buildFlags)
	}

	name := strings.NewReplacer("{{ .Version }}", "{V}", "{{ .Os }}", "{OS}", "{{ .Arch }}", "{ARCH}").Replace(a.NameTemplate)
	if name != want.name {
		t.Errorf("archive name %s, the Makefile's %s", name, want.name)
	}
	if !slices.Equal(a.IDs, []string{b.ID}) || !slices.Equal(a.Formats, []string{"tar.gz"}) ||
		len(a.FormatOverrides) != 1 || a.FormatOverrides[0].Goos != "windows" || !slices.Equal(a.FormatOverrides[0].Formats, []string{"zip"}) {
		t.Errorf("archives %+v: want tar.gz of the build, zip for Windows", a)
	}
	if !slices.Equal(a.Files, want.files) {
		t.Errorf("archives hold %v beside the binary, the Makefile's %v", a.Files, want.files)
	}
	if g.Checksum.Algorithm != "sha256" || g.Checksum.NameTemplate != "SHA256SUMS" {
		t.Errorf("checksums %+v: want sha256 in SHA256SUMS, as make release writes", g.Checksum)
	}
}
