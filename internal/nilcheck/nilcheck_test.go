package nilcheck_test

import (
	"io"
	"testing"

	"github.com/spigot-go/spigot/internal/nilcheck"
)

type impl struct{}

func (*impl) Read([]byte) (int, error) { return 0, io.EOF }

func TestNil(t *testing.T) {
	var (
		nilPtr  *impl
		nilMap  map[string]int
		nilFunc func()
		reader  io.Reader = nilPtr
	)
	for i, tt := range []struct {
		v    any
		want bool
	}{
		{nil, true},
		{nilPtr, true},
		{reader, true},
		{nilMap, true},
		{nilFunc, true},
		{&impl{}, false},
		{impl{}, false},
		{0, false},
	} {
		if got := nilcheck.Nil(tt.v); got != tt.want {
			t.Errorf("step %d: Nil(%#v) = %v, want %v", i, tt.v, got, tt.want)
		}
	}
}
