package dashboard

// SetDeadScan bounds the search of dead letters by UUID to n per group, in
// pages of page, until the returned function restores the bounds.
func SetDeadScan(n, page int) (restore func()) {
	was, wasPage := deadScan, deadScanPage
	deadScan, deadScanPage = n, page
	return func() { deadScan, deadScanPage = was, wasPage }
}
