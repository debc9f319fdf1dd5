#!/bin/bash
echo 2 > /app/b.txt
