# Plots docs/accuracy.dat (made by build/report): the lowest PSNR over the photographs, per
# method, against sigma. Run by `make report`.
set terminal pngcairo size 900,560 font ",11"
set output "docs/accuracy.png"
set termoption noenhanced
set title "blurd CPU methods against the exact Gaussian (lowest PSNR over 3 photographs)"
set xlabel "sigma (pixels)"
set ylabel "PSNR (dB)"
set logscale x
set grid
set key bottom left
set yrange [20:62]
set xrange [0.4:400]
plot for [i=2:8] "docs/accuracy.dat" using 1:i with linespoints lw 2 pt i ps 1.3 title columnhead(i)
