package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

// takeSecret reads the sealing keys from INTERLOCK_SECRET, or from the file
// INTERLOCK_SECRET_FILE names, and removes both variables from this
// process's environment, so no child started later can inherit them. It
// returns "" when neither is set (the gate then makes a key for this
// process and says so).
func takeSecret() (string, error) {
	value, inEnv := os.LookupEnv(interlock.SecretEnv)
	file, inFile := os.LookupEnv(config.SecretFileEnv)
	defer os.Unsetenv(interlock.SecretEnv)
	defer os.Unsetenv(config.SecretFileEnv)
	switch {
	case inEnv && inFile:
		return "", fmt.Errorf("both %s and %s are set: keep the keys in one place", interlock.SecretEnv, config.SecretFileEnv)
	case inFile:
		return readSecretFile(file)
	}
	return value, nil
}

// readSecretFile reads the comma-separated sealing keys from a file that
// only its owner can read.
func readSecretFile(name string) (string, error) { return readKeysFile(config.SecretFileEnv, name) }

// readKeysFile reads comma-separated sealing keys from a regular file
// only its owner can read; label names it in errors.
func readKeysFile(label, name string) (string, error) {
	fh, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", label, err)
	}
	defer fh.Close()
	// The mode is checked on the file that was opened, so it cannot be
	// swapped between the check and the read.
	info, err := fh.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", label, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", label, name)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s: %s can be read by group or others (mode %04o); run chmod 600 %s", label, name, perm, name)
	}
	// Far more than any list of keys, so a wrong path cannot make the
	// gateway read a huge file into memory.
	const maxSecretFile = 64 << 10
	data, err := io.ReadAll(io.LimitReader(fh, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", label, err)
	}
	if len(data) > maxSecretFile {
		return "", fmt.Errorf("%s: %s is larger than %d bytes; it should hold only comma-separated keys", label, name, maxSecretFile)
	}
	keys := strings.TrimSpace(string(data))
	if keys == "" {
		return "", fmt.Errorf("%s: %s holds no key", label, name)
	}
	return keys, nil
}

// dataSecretName is the file in the data directory that holds the sealing
// key made when none is given.
const dataSecretName = "secret"

// dataSecret returns the sealing key kept in dataDir, making it first
// when there is none: a gateway started without INTERLOCK_SECRET keeps its
// confirm tokens and request states good across restarts, and every
// process on the data directory (a `serve --stdio` per editor window, one
// `serve` with the console) seals with the same key. made says this call
// made it. Two processes starting at once make one key between them: the
// file appears whole, by a hard link from a file already written, or not
// at all.
func dataSecret(dataDir string) (secret string, made bool, err error) {
	name := filepath.Join(dataDir, dataSecretName)
	if _, err := os.Lstat(name); err == nil {
		s, err := readDataSecret(name)
		return s, false, err
	}
	tmp, err := os.CreateTemp(dataDir, ".secret-*")
	if err != nil {
		return "", false, fmt.Errorf("making a sealing key in %s: %w", dataDir, err)
	}
	defer os.Remove(tmp.Name())
	key := randomText()
	if _, err := tmp.WriteString(key + "\n"); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("making a sealing key in %s: %w", dataDir, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("making a sealing key in %s: %w", dataDir, err)
	}
	if err := tmp.Close(); err != nil {
		return "", false, fmt.Errorf("making a sealing key in %s: %w", dataDir, err)
	}
	if err := os.Link(tmp.Name(), name); errors.Is(err, fs.ErrExist) {
		s, err := readDataSecret(name)
		return s, false, err
	} else if err != nil {
		return "", false, fmt.Errorf("keeping the sealing key as %s: %w", name, err)
	}
	return key, true, nil
}

// readDataSecret reads the data directory's sealing key with the checks
// of INTERLOCK_SECRET_FILE (a regular file only its owner can read).
func readDataSecret(name string) (string, error) {
	s, err := readKeysFile("the data directory's sealing key", name)
	if err != nil {
		return "", fmt.Errorf("%w (remove it to make a new one; confirmations under way are then refused)", err)
	}
	return s, nil
}
