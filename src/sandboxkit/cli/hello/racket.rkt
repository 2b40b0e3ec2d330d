#lang racket
(displayln "hello")
