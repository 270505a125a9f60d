package app

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// docs/configuration.md's table lists every setting, in the order of the
// settings table, each with its flag (or none) and its variable; a setting
// added, renamed or dropped in one place and not the other fails here.
func TestConfigurationDocMatchesSettings(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (?:`-([a-z-]+)`)? *\\| `([A-Z_]+)` \\|")
	var documented, declared []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[2]+" -"+m[1])
	}
	for _, s := range settings {
		declared = append(declared, s.env+" -"+s.flag)
	}
	if !slices.Equal(documented, declared) {
		t.Errorf("docs/configuration.md lists (variable -flag)\n%q\nthe settings table declares\n%q", documented, declared)
	}
}
