package config

import "strings"

// nearest returns the known name that name most likely meant, or "" when
// none is close. Each key is known by its YAML path and by its flag, as
// an operator writes one for the other (data-dir for data_dir in the
// file, GATEHOUSE_DATA_DIR for GATEHOUSE_DATA): spell is how the caller
// writes the key it suggests. Case and the separators -, _ and . do not
// count; beyond them, two edits do, in a name at least four times as long.
// extra maps other names to how the caller writes them.
func nearest(name string, spell func(k key) string, extra map[string]string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '-' || r == '.' {
				return '_'
			}
			return r
		}, strings.ToLower(s))
	}
	n := norm(name)
	best, bestDist := "", 3
	try := func(candidate, suggestion string) {
		c := norm(candidate)
		if d := editDistance(n, c); d < bestDist && d*4 <= len(c) {
			best, bestDist = suggestion, d
		}
	}
	for _, k := range keys {
		try(k.name, spell(k))
		try(k.flag, spell(k))
	}
	for e, suggestion := range extra {
		try(e, suggestion)
	}
	return best
}

// didYouMean is the hint an error about an unknown name ends with.
func didYouMean(suggestion string) string {
	if suggestion == "" {
		return ""
	}
	return " (did you mean " + suggestion + "?)"
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			next := min(row[j]+1, row[j-1]+1, diag+cost)
			diag, row[j] = row[j], next
		}
	}
	return row[len(b)]
}
