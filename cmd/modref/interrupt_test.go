//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// signalWriter sends SIGINT to the process at its first write, which
// modref train makes after an evaluation, while its handler is installed.
type signalWriter struct {
	bytes.Buffer
	sent bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if !w.sent {
		w.sent = true
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			return 0, err
		}
	}
	return w.Buffer.Write(p)
}

// TestTrainInterruptResume interrupts modref train with SIGINT (as Ctrl-C
// does), expects exit status 130 and a checkpoint, resumes it, and expects
// the parameters and optimiser state of an uninterrupted run, byte for byte.
func TestTrainInterruptResume(t *testing.T) {
	dir := t.TempDir()
	data := textFile(t, dir)
	args := []string{"--data", data, "--d", "16", "--heads", "2", "--layers", "2", "--seq", "16", "--batch", "2",
		"--steps", "300", "--warmup", "2", "--eval-every", "2", "--eval-batches", "1", "--save-every", "0"}
	stopped, whole := filepath.Join(dir, "stopped"), filepath.Join(dir, "whole")
	var sw signalWriter
	var errOut bytes.Buffer
	if code := run(append([]string{"train", "--out", stopped}, args...), &sw, &errOut); code != 130 {
		t.Fatalf("interrupted train: exit %d, want 130 (stderr %q)", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "checkpoint saved") {
		t.Errorf("interrupted train said %q, want that it saved a checkpoint", errOut.String())
	}
	errOut.Reset()
	var out bytes.Buffer
	if code := run([]string{"train", "--out", stopped, "--resume", "--data", data}, &out, &errOut); code != 0 {
		t.Fatalf("resume: exit %d, stderr %q", code, errOut.String())
	}
	if code := run(append([]string{"train", "--out", whole}, args...), &out, &errOut); code != 0 {
		t.Fatalf("uninterrupted train: exit %d, stderr %q", code, errOut.String())
	}
	for _, name := range []string{"params.npz", "optimizer.npz"} {
		a, errA := os.ReadFile(filepath.Join(stopped, "checkpoint", name))
		b, errB := os.ReadFile(filepath.Join(whole, "checkpoint", name))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the interrupted and resumed run and the uninterrupted one (%v, %v)", name, errA, errB)
		}
	}
}
