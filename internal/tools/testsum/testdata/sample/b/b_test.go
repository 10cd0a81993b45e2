// Package b fails.
package b

import "testing"

func TestOK(t *testing.T) { t.Log("quiet unless verbose") }

func TestFails(t *testing.T) {
	t.Run("inner", func(t *testing.T) { t.Error("the inner failure") })
}
