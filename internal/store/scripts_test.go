package store

import (
	"regexp"
	"strings"
	"testing"
)

// TestScriptsDeclareTheirInclude guards the include line: a script that
// calls a helper of lib.lua without "-- include: lib" fails only when it
// runs (attempt to call a nil value), so check every script here.
func TestScriptsDeclareTheirInclude(t *testing.T) {
	lib := readScript("lib")
	var helpers []string
	for _, m := range regexp.MustCompile(`(?m)^local function (\w+)`).FindAllStringSubmatch(lib, -1) {
		helpers = append(helpers, m[1])
	}
	if len(helpers) == 0 {
		t.Fatal("lib.lua defines no helpers")
	}
	calls := regexp.MustCompile(`\b(` + strings.Join(helpers, "|") + `)\(`)
	entries, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name == "lib" {
			continue
		}
		src := readScript(name)
		body := src
		if strings.HasPrefix(body, "#!") {
			_, body, _ = strings.Cut(body, "\n")
		}
		first, _, _ := strings.Cut(body, "\n")
		includes := first == includeLine+"lib"
		uses := calls.FindString(body)
		if uses != "" && !includes {
			t.Errorf("%s.lua calls %s of lib.lua but does not start with %q", name, uses, includeLine+"lib")
		}
		if includes && uses == "" {
			t.Errorf("%s.lua includes lib.lua but calls none of its helpers", name)
		}
		full := scriptSource(name)
		if includes && !strings.Contains(full, "local function fields(") {
			t.Errorf("%s.lua: lib.lua was not put in front", name)
		}
		if strings.HasPrefix(src, "#!") && !strings.HasPrefix(full, strings.SplitAfter(src, "\n")[0]) {
			t.Errorf("%s.lua: its shebang is no longer the first line", name)
		}
	}
}
