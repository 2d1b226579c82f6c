// Package browsertest drives the dashboard in headless Chromium (chromedp)
// against a real redis-server. It is a module of its own so that chromedp
// stays out of the library's go.mod; it has no code besides its tests.
package browsertest
