package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

const testKeys = "a sealing key that is long enough to use,an older key that still opens tokens"

func TestTakeSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"neither", nil, "", ""},
		{"environment", map[string]string{interlock.SecretEnv: testKeys}, testKeys, ""},
		{"file", map[string]string{config.SecretFileEnv: file("keys", testKeys+"\n", 0o600)}, testKeys, ""},
		{"file readable by the group", map[string]string{config.SecretFileEnv: file("group", testKeys, 0o640)}, "", "chmod 600"},
		{"file readable by anyone", map[string]string{config.SecretFileEnv: file("world", testKeys, 0o604)}, "", "can be read by group or others (mode 0604)"},
		{"empty file", map[string]string{config.SecretFileEnv: file("empty", " \n", 0o600)}, "", "holds no key"},
		{"missing file", map[string]string{config.SecretFileEnv: filepath.Join(dir, "nope")}, "", "no such file"},
		{"a directory", map[string]string{config.SecretFileEnv: dir}, "", ""},
		{"both", map[string]string{interlock.SecretEnv: testKeys, config.SecretFileEnv: file("both", testKeys, 0o600)}, "", "keep the keys in one place"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{interlock.SecretEnv, config.SecretFileEnv} {
				t.Setenv(name, "")
				os.Unsetenv(name)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := takeSecret()
			switch {
			case tt.name == "a directory":
				if err == nil {
					t.Error("a directory was read as the key file")
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Errorf("takeSecret = %q, %v; want %q", got, err, tt.want)
			}
			for _, name := range []string{interlock.SecretEnv, config.SecretFileEnv} {
				if _, set := os.LookupEnv(name); set {
					t.Errorf("%s is still in the gateway's environment", name)
				}
			}
		})
	}
}

// TestSealingKeyStaysWithTheGateway starts the real gateway with an
// upstream child that tries to read the key: from its own environment, and
// from its parent's /proc/<pid>/environ. Both run as an unprivileged user
// (nobody, when the tests run as root), as a same-user attacker would.
func TestSealingKeyStaysWithTheGateway(t *testing.T) {
	if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Getuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	const secret = "a sealing key no child may ever see 0123456789"
	tests := []struct {
		name string
		// env sets the key for the gateway; dir is where a key file can go.
		env func(dir string) []string
	}{
		{"key in INTERLOCK_SECRET", func(string) []string { return []string{interlock.SecretEnv + "=" + secret} }},
		{"key in INTERLOCK_SECRET_FILE", func(dir string) []string {
			p := filepath.Join(dir, "keys")
			if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
			if cred != nil {
				if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
			return []string{config.SecretFileEnv + "=" + p}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "interlock-secret")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			parentEnv, childEnv, readErr := filepath.Join(dir, "parent-env"), filepath.Join(dir, "child-env"), filepath.Join(dir, "read-error")
			// The child reads what it can, then becomes the demo server so
			// the gateway starts normally.
			script := "cat /proc/$PPID/environ > " + parentEnv + " 2> " + readErr + "; env > " + childEnv + ".tmp; mv " + childEnv + ".tmp " + childEnv +
				"; exec " + binary + " demo --db " + filepath.Join(dir, "demo.db")
			configFile := filepath.Join(dir, "gateway.yaml")
			if err := os.WriteFile(configFile, []byte("upstreams:\n  - name: demo\n    command: [/bin/sh, -c, '"+script+"']\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := command("", "serve", "--stdio", "--config", configFile, "--data", filepath.Join(dir, "data"))
			cmd.Env = append(cmd.Env, tt.env(dir)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			deadline := time.After(20 * time.Second)
			for ran := false; !ran; {
				_, err := os.Stat(childEnv)
				ran = err == nil
				select {
				case err := <-done:
					t.Fatalf("the gateway exited (%v) before its child ran:\n%s", err, stderr.String())
				case <-deadline:
					_ = cmd.Process.Kill()
					t.Fatalf("the upstream child never ran; gateway stderr:\n%s", stderr.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			stdin.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Error("the gateway did not exit when stdin closed")
			}
			for _, p := range []string{parentEnv, childEnv} {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				for _, leak := range []string{secret, interlock.SecretEnv + "=", config.SecretFileEnv + "="} {
					if strings.Contains(string(b), leak) {
						t.Errorf("the child found %q in %s", leak, filepath.Base(p))
					}
				}
			}
			if b, _ := os.ReadFile(readErr); !strings.Contains(strings.ToLower(string(b)), "permission denied") {
				t.Errorf("reading the gateway's /proc/<pid>/environ did not fail with permission denied: %q", b)
			}
			if strings.Contains(stderr.String(), secret) {
				t.Error("the gateway printed its key")
			}
		})
	}
}

// TestDataSecret: without INTERLOCK_SECRET, the first gateway on a data
// directory makes a sealing key there and every later one reads it; many
// starting at once agree on one key; a key file others may read, or one
// that is empty, stops the gateway with what to do.
func TestDataSecret(t *testing.T) {
	t.Run("made once, then reused", func(t *testing.T) {
		dir := t.TempDir()
		first, made, err := dataSecret(dir)
		if err != nil || !made || len(first) < 32 {
			t.Fatalf("first: %q %t %v", first, made, err)
		}
		info, err := os.Stat(filepath.Join(dir, dataSecretName))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("the key file: %v %v", info, err)
		}
		again, made, err := dataSecret(dir)
		if err != nil || made || again != first {
			t.Errorf("second: %q %t %v, want %q", again, made, err, first)
		}
	})
	t.Run("many at once agree", func(t *testing.T) {
		dir := t.TempDir()
		keys := make([]string, 16)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() {
				k, _, err := dataSecret(dir)
				if err != nil {
					t.Error(err)
				}
				keys[i] = k
			})
		}
		wg.Wait()
		for _, k := range keys {
			if k != keys[0] || k == "" {
				t.Fatalf("keys differ: %q", keys)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".secret-*")); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	})
	for _, tt := range []struct {
		name    string
		content string
		mode    os.FileMode
		says    string
	}{
		{"readable by others", "k" + strings.Repeat("x", 40), 0o644, "chmod 600"},
		{"empty", "", 0o600, "holds no key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, dataSecretName)
			if err := os.WriteFile(name, []byte(tt.content), tt.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(name, tt.mode)
			if _, _, err := dataSecret(dir); err == nil || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), "data directory's sealing key") {
				t.Errorf("err = %v, want it to say %q", err, tt.says)
			}
		})
	}
}
