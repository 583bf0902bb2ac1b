package denycache

// SetWaitHook makes f be called by every request about to wait for
// another's probe of the store, until the returned func restores none.
func SetWaitHook(f func()) (restore func()) {
	waitHook = f
	return func() { waitHook = nil }
}
