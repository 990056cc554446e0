package journaltest

// CheckNames returns the names of the suite's checks, as their subtests
// are named.
func CheckNames() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}
