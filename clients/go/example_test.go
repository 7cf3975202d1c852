package onceq_test

// The payments example runs end to end, and a user's own module builds
// against the client offline (a replace directive, no module proxy).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goBuild builds pkg (in dir) into a binary under t.TempDir().
func goBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prog")
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func TestPaymentsExampleChargesNobodyTwice(t *testing.T) {
	needServer(t)
	bin := goBuild(t, ".", "./examples/payments")
	cmd := exec.Command(bin, "demo", "--url", shared.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"is killed (SIGKILL)", "replayed, card NOT charged again", "nobody was charged twice"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
}

func TestAUserModuleBuildsAgainstTheClientOffline(t *testing.T) {
	needServer(t)
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	app := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.19\n\nrequire onceq v0.0.0\n\nreplace onceq => " + here + "\n",
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"onceq"
)

func main() {
	c := onceq.NewClient(os.Args[1])
	if err := c.Err(); err != nil {
		panic(err)
	}
	h, err := c.Healthz(context.Background())
	fmt.Println(h.OK, err)
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(goBuild(t, app, "."), shared.URL).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "true <nil>" {
		t.Fatalf("%v: %s", err, out)
	}
}
