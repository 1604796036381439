module cozy.local/node/tools/podbin

go 1.26.0
