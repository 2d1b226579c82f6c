package redisdelay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadme_QuickStartCompiles builds the README's quick start as a user
// pastes it: the first ```go block under "## Quick start", as main.go of a
// fresh module that uses this repository through a replace directive. It
// resolves nothing over the network (GOPROXY=off): the quick start may only
// import modules this repository already requires, which the module cache
// holds whenever the repository's own tests build.
func TestReadme_QuickStartCompiles(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := quickStartBlock(readme)
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	// The repository's go.mod with another module path keeps every version
	// the repository is tested with, so the build needs nothing new.
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(goMod), "module quickstart")
	mod += "\nrequire github.com/redisdelay/watermill-redisdelay v0.0.0-00010101000000-000000000000\n" +
		"\nreplace github.com/redisdelay/watermill-redisdelay => " + strings.ReplaceAll(root, `\`, `/`) + "\n"

	dir := t.TempDir()
	for name, data := range map[string][]byte{"main.go": src, "go.mod": []byte(mod), "go.sum": goSum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's quick start does not compile as pasted: go %s: %v\n%s\n--- the block (README.md, under \"## Quick start\"):\n%s",
				strings.Join(args, " "), err, out, numbered(src))
		}
	}
	run("build", "-o", filepath.Join(dir, "quickstart"), ".")
	run("vet", ".")
}

// quickStartBlock returns the first ```go block after the "## Quick start"
// heading and before the next "## " heading.
func quickStartBlock(readme []byte) ([]byte, error) {
	var block bytes.Buffer
	inSection, inBlock := false, false
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inBlock && strings.HasPrefix(line, "```"):
			return block.Bytes(), nil
		case inBlock:
			block.WriteString(line + "\n")
		case strings.HasPrefix(line, "## "):
			inSection = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Quick start"
		case inSection && strings.TrimSpace(line) == "```go":
			inBlock = true
		}
	}
	if inBlock {
		return nil, fmt.Errorf("README.md: the quick start's ```go block is not closed")
	}
	return nil, fmt.Errorf("README.md has no ```go block under a \"## Quick start\" heading: the quick start must stay a complete program that this test builds")
}

func numbered(src []byte) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(string(src), "\n"), "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, line)
	}
	return b.String()
}
