package main

import "testing"

func TestHello(t *testing.T) {
	if "hel"+"lo" != "hello" {
		t.Fatal("string concatenation")
	}
}
