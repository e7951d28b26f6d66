//go:build !linux

package main

// forbidDumps does nothing where the system offers no per-process switch;
// the sealing keys are then as safe as the user's account.
func forbidDumps() error { return nil }
