package main

// Helpers of several test files of the package (the test server and the
// CLI runner are in main_test.go).

// uuidsOf is the UUIDs of listed messages.
func uuidsOf(ms []waitingJSON) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.UUID)
	}
	return ids
}
