// Package nilcheck tells a nil argument from a usable one, for the
// constructors that panic on a nil store or client.
package nilcheck

import "reflect"

// Nil reports whether v is nil: a nil interface, or one that holds a nil
// pointer, map, slice, func or channel.
func Nil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}
