#!/bin/bash
echo 'Hello, cairn!' > /app/hello.txt
