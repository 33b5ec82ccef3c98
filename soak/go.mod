module github.com/distlock/lock/soak

go 1.25.0

replace github.com/distlock/lock => ../

require github.com/anishathalye/porcupine v1.3.1
