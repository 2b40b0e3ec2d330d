<?php
echo "hello\n";
