package main

// testify, resolved as a Go module with the network off (Sandbox Fusion's runtime/go requires it).
import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHello(t *testing.T) {
	require.NotEmpty(t, "hello")
	assert.Equal(t, "hello", "hel"+"lo")
}
