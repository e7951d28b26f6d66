package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// takeSecret reads the sealing keys from INTERLOCK_SECRET, or from the file
// INTERLOCK_SECRET_FILE names, and removes both variables from this
// process's environment, so no child started later can inherit them. It
// returns "" when neither is set (the gate then makes a key for this
// process and says so).
func takeSecret() (string, error) {
	value, inEnv := os.LookupEnv(interlock.SecretEnv)
	file, inFile := os.LookupEnv(policy.SecretFileEnv)
	defer os.Unsetenv(interlock.SecretEnv)
	defer os.Unsetenv(policy.SecretFileEnv)
	switch {
	case inEnv && inFile:
		return "", fmt.Errorf("both %s and %s are set: keep the keys in one place", interlock.SecretEnv, policy.SecretFileEnv)
	case inFile:
		return readSecretFile(file)
	}
	return value, nil
}

// readSecretFile reads the comma-separated sealing keys from a file that
// only its owner can read.
func readSecretFile(name string) (string, error) {
	fh, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", policy.SecretFileEnv, err)
	}
	defer fh.Close()
	// The mode is checked on the file that was opened, so it cannot be
	// swapped between the check and the read.
	info, err := fh.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", policy.SecretFileEnv, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", policy.SecretFileEnv, name)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s: %s can be read by group or others (mode %04o); run chmod 600 %s", policy.SecretFileEnv, name, perm, name)
	}
	// Far more than any list of keys, so a wrong path cannot make the
	// gateway read a huge file into memory.
	const maxSecretFile = 64 << 10
	data, err := io.ReadAll(io.LimitReader(fh, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", policy.SecretFileEnv, err)
	}
	if len(data) > maxSecretFile {
		return "", fmt.Errorf("%s: %s is larger than %d bytes; it should hold only comma-separated keys", policy.SecretFileEnv, name, maxSecretFile)
	}
	keys := strings.TrimSpace(string(data))
	if keys == "" {
		return "", fmt.Errorf("%s: %s holds no key", policy.SecretFileEnv, name)
	}
	return keys, nil
}
